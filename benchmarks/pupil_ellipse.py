"""Detection's corner model with the white's pupil ellipse against the paper's disc (issue 23).

Reads finished ``plenocal run`` output folders of the real-optics R12-B set (one run with
``--pupil-shape disc``, the default, one with ``--pupil-shape white``, same dataset) and prints
JSON per run: F, D, d, f_i, the principal point and the exit pupil against the set's
``thin_lens_equivalent`` truth (error in % and in the larger σ), the features the calibration
rejects (and per 1 mm ring of field radius), the RMSEs, ε_z and the report's verdict; and how many
micro-images the white gave an ellipse. With ``--prism`` also the byte comparison of two runs'
detections on PRISM.

Usage::

    PYTHONPATH=src python benchmarks/pupil_ellipse.py RUN_OUT [RUN_OUT ...] [--set SET]
        [--prism PRISM_OUT_A PRISM_OUT_B]

Each RUN_OUT must sit beside a ``dataset`` folder (``RUN_OUT/../dataset``), as
``benchmarks/independent.py`` and ``plenocal run`` on an imported set leave them. Needs ``../shared``
(the truth); the per-ring table re-runs each calibration in-process (≈ 10–20 s each on 2 cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
SET = ROOT.parent / "shared" / "validation" / "realoptics-r12b"
RING_MM = 1.0
"""Width of the rings of field radius (mm from the principal point) for the rejections."""


def verdict(out: Path) -> dict[str, Any]:
    """The report's verdict and its reasons (from report.html)."""
    html = (out / "report.html").read_text(errors="replace") if (out / "report.html").is_file() else ""
    m = re.search(r'class="verdict" data-status="([^"]+)"', html)
    reasons = re.findall(r"<li><b>([^<]+)</b>:\s*([^<]+)</li>", html.split('class="reasons"', 1)[1].split("</ul>", 1)[0]) if 'class="reasons"' in html else []
    return {"status": m.group(1) if m else None, "reasons": [f"{a}: {b.strip()}" for a, b in reasons]}


def rejections_by_ring(out: Path) -> dict[str, Any]:
    """The run's calibration again, in-process: which features it rejects, per ring of field
    radius (the micro-image's node from the calibrated principal point), as periph_residuals.py counts."""
    from periph_residuals import calibrate_in_process

    res, inputs = calibrate_in_process(out)
    cam, obs = res.camera, inputs.observations.bap
    b = obs.select(np.isin(obs.frame, np.asarray(inputs.frames)) & (obs.node >= 0))
    rej = res.rejected_features
    keys = set(zip(rej.frame.tolist(), rej.k.tolist(), rej.l.tolist(), rej.node.tolist(), strict=True))
    rejected = np.array([key in keys for key in zip(b.frame.tolist(), b.k.tolist(), b.l.tolist(), b.node.tolist(), strict=True)])
    d = inputs.camera.grid.centres(b.k, b.l) - np.asarray(cam.principal_point_px)
    ring = np.floor(np.hypot(d[:, 0], d[:, 1]) * cam.sensor.pixel_size_mm / RING_MM).astype(int)
    rows = {f"{q}-{q + 1}": {"features": int((ring == q).sum()), "rejected": int(rejected[ring == q].sum())}
            for q in range(int(ring.max()) + 1) if (ring == q).any()}
    return {"rejected": int(rejected.sum()), "of": len(b), "by_ring_mm": rows, "F_mm": float(cam.main_lens.focal_length_mm)}


def summary(out: Path, set_dir: Path, *, rings: bool) -> dict[str, Any]:
    from independent import run_realoptics

    res = run_realoptics(set_dir, out.parent, reuse=True)
    keep = {k: res.get(k) for k in ("calibration", "evaluation", "linking")}
    det = json.loads((out / "detection" / "detection.json").read_text())
    keep["detection"] = {"pupil_shape": det.get("pupil_shape", "disc"), "pupil_ellipses": det.get("pupil_ellipses", 0),
                         "n_bap_pass1": det.get("n_bap")}
    rep = json.loads((out / "calibration" / "report.json").read_text())
    keep["rejected"] = rep.get("rejected")
    keep["n_bap_calibration"] = rep.get("n_bap")
    keep["verdict"] = verdict(out)
    if rings:
        keep["rejections"] = rejections_by_ring(out)
    return keep


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def prism_compare(a: Path, b: Path) -> dict[str, Any]:
    """Whether two PRISM runs' detections (both passes) and calibrations are the same bytes."""
    from plenocal.io.observations import read_observations

    out: dict[str, Any] = {}
    for stage in ("detection", "detection-pass2"):
        pa, pb = a / stage / "observations.npz", b / stage / "observations.npz"
        oa, ob = read_observations(pa), read_observations(pb)
        same = len(oa.bap) == len(ob.bap) and all(
            np.array_equal(getattr(oa.bap, f), getattr(ob.bap, f)) for f in ("frame", "k", "l", "u", "v", "rho", "node"))
        out[stage] = {"features": [len(oa.bap), len(ob.bap)], "identical_features": bool(same),
                      "npz_bytes_identical": digest(pa) == digest(pb)}
    ca, cb = (json.loads((x / "calibration" / "camera.json").read_text()) for x in (a, b))
    out["calibration_camera_identical"] = ca == cb
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, help="plenocal run output folders of the real-optics set")
    ap.add_argument("--set", type=Path, default=SET)
    ap.add_argument("--no-rings", action="store_true", help="skip the per-ring rejections (no re-calibration)")
    ap.add_argument("--prism", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"), default=None)
    a = ap.parse_args()
    doc: dict[str, Any] = {str(r): summary(r, a.set, rings=not a.no_rings) for r in a.runs}
    if a.prism:
        doc["prism"] = prism_compare(*a.prism)
    print(json.dumps(doc, indent=1, default=lambda x: x.item() if hasattr(x, "item") else str(x)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
