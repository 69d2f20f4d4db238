"""Linking near the MLA's conjugate plane and the second detection pass, against the truth (issue 24).

Usage: python benchmarks/link_passes.py SET OUT [--reuse]

SET is a plenocal dataset with ground truth (``ground_truth/observations.npz``: the simulator's
oracle features), e.g. made by ``benchmarks/make_link_set.py`` (keep it under /work/runs). As
``plenocal run`` does: ``precalibrate``, ``detect`` (first pass, completing linked frames with
the pre-calibration camera), ``calibrate``, ``detect --previous`` (second pass with the calibrated
camera). Per frame: the true nodes seen in ≥ 2 micro-images (a frame with ≥ 4 should link), and
those seen in ≥ 2 where a detector resolves them (``should_link_resolvable``: |ρ| within
RESOLVABLE_BLUR_FRACTION of the acceptance disc, the node prediction's bound), the
features and nodes linked in pass 1 and after pass 2, the features on a wrong node (the oracle's
node of that micro-lens differs, or the oracle has none there), what each pass did, and the
wall time of detection, of the pass-1 linking (``linking_s``: the completion included) and
completion, and of pass 2; per stage its wall and CPU seconds, and the load average. Prints JSON
(also OUT/link-passes.json). ``extra_over_detection`` is (completion + pass 2) / detection, the
figure earlier notes quote; ``linking_and_pass2_over_detection`` adds the rest of the linking.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from plenocal.cli.main import main as plenocal
from plenocal.depth.matching import micro_image_radii_px
from plenocal.detect.nodes import RESOLVABLE_BLUR_FRACTION
from plenocal.detect.pipeline import BORDER_MARGIN_PX, USABLE_RADIUS_FRACTION
from plenocal.io import read_dataset
from plenocal.io.camera import read_camera
from plenocal.io.observations import read_observations


def stage(argv: list[str], out: Path, *, reuse: bool) -> dict[str, float]:
    """Run ``plenocal ARGV`` unless ``reuse`` and ``out`` exists; its wall and CPU seconds (this
    process's, all its threads: ``time.process_time``; and its children's, ``os.times``), all 0
    when reused."""
    if reuse and out.exists():
        return {"wall_s": 0.0, "cpu_s": 0.0, "children_cpu_s": 0.0}
    t0, c0, k0 = time.perf_counter(), time.process_time(), os.times()
    with contextlib.redirect_stdout(sys.stderr):  # the stages' own lines: stdout carries the JSON only
        code = plenocal(argv)
    if code not in (0, 3):  # 3: written, the verdict says not trustworthy (the second pass still runs on it, as in plenocal run)
        raise SystemExit(f"plenocal {' '.join(argv)} exited {code}")
    k1 = os.times()
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "children_cpu_s": (k1.children_user + k1.children_system) - (k0.children_user + k0.children_system)}


def wrong_nodes(bap, truth, relative: set[int] = frozenset(), *, columns: int = 0) -> tuple[dict[int, int], dict[int, int]]:
    """Per frame: features whose node is not the oracle's node of that (frame, k, l) — for a frame
    in ``relative`` (linked with relative ids), not its node under the one rigid motion of the grid
    that takes most (:func:`plenocal.calib.linking.grid_motion`, ``columns`` the board's); and
    features in a micro-lens where the oracle has no node."""
    from plenocal.calib.linking import grid_motion

    key = {(int(f), int(k), int(l)): int(n) for f, k, l, n in zip(truth.frame, truth.k, truth.l, truth.node, strict=True)}
    wrong: dict[int, int] = {}
    absent: dict[int, int] = {}
    pairs: dict[int, list[tuple[int, int]]] = {}
    for f, k, l, n in zip(bap.frame, bap.k, bap.l, bap.node, strict=True):
        t = key.get((int(f), int(k), int(l)))
        if t is None:
            absent[int(f)] = absent.get(int(f), 0) + 1
        elif int(f) in relative:
            pairs.setdefault(int(f), []).append((t, int(n)))
        elif t != int(n):
            wrong[int(f)] = wrong.get(int(f), 0) + 1
    for f, tn in pairs.items():
        t, n = np.array(tn).T
        bad = int((~grid_motion(t, n, columns=columns)[1]).sum())
        if bad:
            wrong[f] = bad
    return wrong, absent


def resolvable(truth, camera, f_number: float) -> np.ndarray:
    """(n,) the truth's views whose corner a detector resolves: |ρ| at most
    RESOLVABLE_BLUR_FRACTION of the acceptance disc (usable radius − border margin) of the
    micro-image's type at ``f_number``, as the node prediction bounds it."""
    types = camera.mla.types.type_of(truth.k, truth.l) if camera.n_types else np.zeros(len(truth.k), dtype=np.int64)
    radius_px = micro_image_radii_px(camera, np.asarray(types, dtype=np.int64), f_number)
    return np.abs(truth.rho) <= RESOLVABLE_BLUR_FRACTION * (USABLE_RADIUS_FRACTION * radius_px - BORDER_MARGIN_PX)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--reuse", action="store_true", help="keep stage outputs already in OUT")
    args = ap.parse_args()
    ds, out = args.set, args.out
    out.mkdir(parents=True, exist_ok=True)
    dataset = read_dataset(ds)
    truth = read_observations(ds / "ground_truth" / "observations.npz").bap
    pre, det, cal, det2 = out / "precalibration", out / "detection", out / "calibration-pass1", out / "detection-pass2"
    load_before = os.getloadavg()
    wall = {
        "precalibrate": stage(["precalibrate", str(ds), "-o", str(pre)], pre, reuse=args.reuse),
        "detect": stage(["detect", str(ds), "-o", str(det), "--precalibration", str(pre), "--overlays", "0"], det, reuse=args.reuse),
    }
    try:
        wall["calibrate"] = stage(["calibrate", str(ds), "-o", str(cal), "--observations", str(det / "observations.npz"),
                                   "--initial", str(pre)], cal, reuse=args.reuse)
        wall["detect_pass2"] = stage(["detect", str(ds), "-o", str(det2), "--precalibration", str(pre), "--previous", str(det),
                                      "--camera", str(cal / "camera.json"), "--poses", str(cal / "poses.json")], det2, reuse=args.reuse)
    except SystemExit as exc:
        print(f"second pass not run: {exc}", file=sys.stderr)
    d1 = json.loads((det / "detection.json").read_text())
    d2 = json.loads((det2 / "detection.json").read_text()) if (det2 / "detection.json").is_file() else None
    o1 = read_observations(det / "observations.npz").bap
    o2 = read_observations(det2 / "observations.npz").bap if d2 else o1
    board = dataset.manifest.target
    relative = {int(r["frame"]) for d in (d1, d2) for r in (d or {}).get("frames", [])
                if (r.get("linking") or {}).get("relative_ids") or (r.get("second_pass") or {}).get("relative_ids")}
    w1, a1 = wrong_nodes(o1, truth, relative, columns=board.columns)
    w2, a2 = wrong_nodes(o2, truth, relative, columns=board.columns)
    frames: dict[str, Any] = {}
    rec2 = {r["frame"]: r for r in (d2 or {}).get("frames", [])}
    true_camera = read_camera(ds / "ground_truth" / "camera.json")
    f_numbers = {int(e.frame): float(e.f_number) for e in dataset.manifest.images if e.frame is not None}
    for r in d1["frames"]:
        f = int(r["frame"])
        views = np.bincount(truth.node[truth.frame == f], minlength=board.n_nodes)
        mine = truth.select(truth.frame == f)
        sharp = np.bincount(mine.node[resolvable(mine, true_camera, f_numbers[f])], minlength=board.n_nodes)
        n1 = o1.frame == f
        n2 = o2.frame == f
        frames[str(f)] = {
            "true_nodes_in_2_views": int((views >= 2).sum()),
            "true_nodes_in_1_view": int((views == 1).sum()),
            "should_link": bool((views >= 2).sum() >= 4),
            "true_nodes_resolvable_in_2_views": int((sharp >= 2).sum()),
            "should_link_resolvable": bool((sharp >= 2).sum() >= 4),
            "pass1": {"linked": bool(r["linking"]["ok"]), "reason": r["linking"]["reason"], "features": int(n1.sum()),
                      "nodes": len(np.unique(o1.node[n1])), "wrong_node_features": w1.get(f, 0),
                      "features_where_truth_has_none": a1.get(f, 0), "predicted_nodes": r.get("predicted_nodes")},
            "pass2": None if d2 is None else {"features": int(n2.sum()), "nodes": len(np.unique(o2.node[n2])),
                                              "wrong_node_features": w2.get(f, 0), "features_where_truth_has_none": a2.get(f, 0),
                                              "what": rec2.get(f, {}).get("second_pass")},
            "detection_s": r.get("wall_time_s"),
            "pass1_completion_s": (r.get("predicted_nodes") or {}).get("wall_time_s", 0.0),
            "pass1_linking_s": r.get("linking_s", 0.0),
            "pass2_s": ((rec2.get(f, {}).get("second_pass") or {}).get("wall_time_s", 0.0)) if d2 else None,
        }
    det_s = sum(v["detection_s"] or 0.0 for v in frames.values())
    comp_s = sum(v["pass1_completion_s"] or 0.0 for v in frames.values())
    link_s = sum(v["pass1_linking_s"] or 0.0 for v in frames.values())
    p2_s = (d2 or {}).get("second_pass", {}).get("wall_time_s")
    res = {
        "machine": machine(),
        "set": str(ds),
        "frames": frames,
        "summary": {
            "frames": len(frames),
            "should_link": sum(v["should_link"] for v in frames.values()),
            "should_link_resolvable": sum(v["should_link_resolvable"] for v in frames.values()),
            "linked_pass1": sum(bool(v["pass1"]["features"]) for v in frames.values()),
            "linked_pass2": None if d2 is None else sum(bool(v["pass2"]["features"]) for v in frames.values()),
            "features_pass1": len(o1), "features_pass2": len(o2),
            "wrong_node_features_pass1": sum(w1.values()), "wrong_node_features_pass2": sum(w2.values()),
            "features_where_truth_has_none_pass2": sum(a2.values()),
            "detection_s": det_s, "pass1_completion_s": comp_s, "pass1_linking_s": link_s, "pass2_s": p2_s,
            "detect_stage_s": d1.get("wall_time_s"),
            "extra_over_detection": (comp_s + (p2_s or 0.0)) / det_s if det_s else None,
            # the measure: linking (with the completion inside it) plus the second pass
            "linking_and_pass2_over_detection": (link_s + (p2_s or 0.0)) / det_s if det_s else None,
            "stages": wall,
            "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        },
    }
    text = json.dumps(res, indent=1)
    (out / "link-passes.json").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
