"""Outlier robustness of the calibration on plenocal's own detections; prints JSON.

Usage: ``python benchmarks/robust_outliers.py [--work DIR] [--seeds 5] [--fractions 0.01,0.03]``

1. Once, cached in ``--work`` (default ``$PLENOCAL_CACHE/bench-robust-outliers``, else
   ``~/.cache/plenocal/bench-robust-outliers``): ``plenocal simulate r12-a --small`` (seed 0,
   30 rays, every image), ``precalibrate``, ``detect`` — plenocal's own detections, with their
   own imperfections.
2. ``clean``: the calibration of those detections with the default options: the reference
   values and σ of the 19 intrinsics.
3. ``gross_uv``: for each fraction and seed, that fraction of the calibration frames' features
   get their (u, v) moved in a random direction by a magnitude log-uniform in [1, 20] px
   (10–250 σ; a wrong corner inside the micro-image); per run, each intrinsic's
   |value − clean| / σ_clean, and how many exceed 3.
4. ``mislinked_cluster``: in one frame at a time, the largest cluster labelled with a
   neighbouring node (a whole mislinked cluster: its features agree with each other, not with
   the board), either swapping labels with that neighbour (``swap``: two mislinked clusters) or
   sharing its label (the (frame, node) then holds both clusters); whether the calibration
   rejects it as a unit — its (frame, node) or its frame in the robust stage
   (``rejected_groups``), or its frame at initialisation when the barycentre PnP no longer fits
   (``extrinsics_init``) — and the intrinsics' deviation.
5. ``mislinked_clusters_and_gross_uv``: a mislinked cluster (sharing a neighbour's label) in
   each of two frames, plus 3 % gross (u, v) errors, per seed.
6. ``mislabelled_frame``: one frame's node labels permuted (a labelling that is not a rigid
   motion of the board); whether the frame is rejected.
7. ``linear_clean``: ``--loss linear`` on the clean detections: F, and the result checks.

Every run is a full :func:`plenocal.calib.calibrate.calibrate` from the pre-calibration's
initial camera, as ``plenocal calibrate DATASET --observations ... --initial ...`` runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

SIGMA_BOUND = 3.0
"""An intrinsic is 'moved' when |value − clean| exceeds this many clean σ."""
MAGNITUDE_PX = (1.0, 20.0)
"""Range of the gross (u, v) errors' magnitude (log-uniform), px."""


def work_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    base = os.environ.get("PLENOCAL_CACHE") or os.path.join(os.path.expanduser("~/.cache"), "plenocal")
    return Path(base) / "bench-robust-outliers"


def prepare(work: Path) -> dict[str, Path]:
    """Simulate, pre-calibrate and detect once (each step skipped when its output exists)."""
    from plenocal.cli.main import dispatch

    ds, pre, det = work / "dataset", work / "precalibration", work / "detection"
    if not (ds / "manifest.json").is_file():
        dispatch(["simulate", "r12-a", "--small", "-o", str(ds), "--quiet"])
    if not (pre / "camera.json").is_file():
        dispatch(["precalibrate", str(ds), "-o", str(pre), "--no-plots"])
    if not (det / "observations.npz").is_file():
        dispatch(["detect", str(ds), "-o", str(det), "--precalibration", str(pre), "--overlays", "0"])
    return {"dataset": ds, "precalibration": pre, "observations": det / "observations.npz"}


def load(paths: dict[str, Path], *, loss: str = "huber") -> tuple[Any, Any]:
    from plenocal.cli.calibrate import options_from_args, read_inputs
    from plenocal.cli.main import build_parser

    args = build_parser().parse_args(
        ["calibrate", str(paths["dataset"]), "-o", "unused", "--observations", str(paths["observations"]),
         "--initial", str(paths["precalibration"]), "--loss", loss])
    return read_inputs(args), options_from_args(args)


def calibrate_with(inputs: Any, options: Any, bap: Any) -> Any:
    from plenocal.calib.calibrate import calibrate
    from plenocal.model.observations import Observations

    obs = Observations(bap, inputs.observations.mic)
    return calibrate(obs, inputs.camera, inputs.dataset.manifest.target, options=options, frames=inputs.frames)


def intrinsics(result: Any) -> dict[str, tuple[float, float]]:
    names = set(result.layout.intrinsic_names)
    return {p.name: (p.value, p.std) for p in result.parameters() if p.name in names and not p.frozen}


def deviation(result: Any, clean: dict[str, tuple[float, float]]) -> dict[str, Any]:
    got = intrinsics(result)
    z = {n: abs(got[n][0] - v) / s for n, (v, s) in clean.items() if s > 0}
    worst = max(z, key=z.__getitem__)
    groups = getattr(result, "rejected_groups", None)
    return {
        "converged": bool(result.converged),
        "n_beyond_3sigma": int(sum(v > SIGMA_BOUND for v in z.values())),
        "n_intrinsics": len(z),
        "max_deviation_sigma": float(z[worst]),
        "worst": worst,
        "F_mm": got["F_mm"][0], "d_mm": got["d_mm"][0],
        "rejected": dict(result.rejected),
        "rejected_clusters": len(groups.get("clusters", [])) if groups else None,
        "rejected_frames": len(groups.get("frames", [])) if groups else None,
    }


def with_gross_uv(bap: Any, frames: tuple[int, ...], fraction: float, seed: int) -> tuple[Any, int]:
    rng = np.random.default_rng(seed)
    cols = bap.columns()
    idx = np.flatnonzero(np.isin(bap.frame, frames))
    pick = rng.choice(idx, size=round(fraction * idx.size), replace=False)
    mag = np.exp(rng.uniform(*np.log(MAGNITUDE_PX), size=pick.size))
    ang = rng.uniform(0, 2 * np.pi, size=pick.size)
    cols["u"] = cols["u"].copy()
    cols["v"] = cols["v"].copy()
    cols["u"][pick] += mag * np.cos(ang)
    cols["v"][pick] += mag * np.sin(ang)
    return type(bap)(**cols), int(pick.size)


def with_mislinked_cluster(bap: Any, board: Any, frame: int, *, swap: bool) -> tuple[Any, dict[str, Any]] | None:
    """The largest cluster of ``frame`` labelled with a neighbouring node: a whole mislinked
    cluster, its features consistent with each other, not with the board. ``swap``: the
    neighbour's cluster gets the first one's label (two mislinked clusters); otherwise the
    neighbour keeps its label and the (frame, node) holds both clusters."""
    cols = {k: v.copy() for k, v in bap.columns().items()}
    rows = bap.frame == frame
    nodes, counts = np.unique(bap.node[rows], return_counts=True)
    present = set(nodes.tolist())
    for n in nodes[np.argsort(-counts)]:
        c, r = int(n) % board.columns, int(n) // board.columns
        for dc, dr in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            cc, rr = c + dc, r + dr
            m = rr * board.columns + cc
            if 0 <= cc < board.columns and 0 <= rr < board.rows and (not swap or m in present):
                sel = rows & (bap.node == n)
                other = rows & (bap.node == m)
                cols["node"][sel] = m
                if swap:
                    cols["node"][other] = n
                return type(bap)(**cols), {"frame": frame, "true_node": int(n), "labelled_node": m, "swap": swap,
                                           "n_features": int(sel.sum()), "n_features_of_labelled_node": int(other.sum())}
    return None


def with_shuffled_frame(bap: Any, frame: int, seed: int = 0) -> Any:
    """``frame``'s node labels permuted (no node keeps its own): a frame linked all wrong."""
    rng = np.random.default_rng(seed)
    cols = {k: v.copy() for k, v in bap.columns().items()}
    rows = bap.frame == frame
    nodes = np.unique(bap.node[rows])
    perm = np.roll(nodes, 1 + int(rng.integers(0, max(nodes.size - 1, 1))))
    lut = dict(zip(nodes.tolist(), perm.tolist(), strict=True))
    cols["node"][rows] = [lut[int(n)] for n in bap.node[rows]]
    return type(bap)(**cols)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=None, help="cache folder of the simulated dataset and detections")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--fractions", default="0.01,0.03")
    ap.add_argument("--clusters", type=int, default=4, help="frames in which to mislink one cluster")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    paths = prepare(work_dir(args.work))
    inputs, options = load(paths)
    board = inputs.dataset.manifest.target
    bap = inputs.observations.bap
    t0 = time.perf_counter()
    clean_res = calibrate_with(inputs, options, bap)
    clean = intrinsics(clean_res)
    out: dict[str, Any] = {
        "machine": machine(),
        "work": str(work_dir(args.work)),
        "n_features": int(np.isin(bap.frame, inputs.frames).sum()),
        "frames": list(inputs.frames),
        "clean": {"converged": bool(clean_res.converged), "wall_s": time.perf_counter() - t0,
                  "rejected": dict(clean_res.rejected),
                  "rejected_groups": getattr(clean_res, "rejected_groups", None),
                  "intrinsics": {n: {"value": v, "std": s} for n, (v, s) in clean.items()}},
        "sigma_bound": SIGMA_BOUND, "magnitude_px": list(MAGNITUDE_PX),
    }
    gross: dict[str, Any] = {}
    for frac in (float(f) for f in args.fractions.split(",")):
        runs = []
        for seed in range(args.seeds):
            bad, n_bad = with_gross_uv(bap, inputs.frames, frac, seed)
            r = calibrate_with(inputs, options, bad)
            runs.append({"seed": seed, "n_corrupted": n_bad, **deviation(r, clean)})
        gross[f"{frac:g}"] = {
            "runs": runs,
            "all_within_3sigma": all(r["n_beyond_3sigma"] == 0 for r in runs),
            "max_deviation_sigma": max(r["max_deviation_sigma"] for r in runs),
        }
    out["gross_uv"] = gross
    mis = []
    frames_by_size = sorted(inputs.frames, key=lambda f: -int(np.sum(bap.frame == f)))
    for swap in (True, False):
        for frame in frames_by_size[: args.clusters]:
            made = with_mislinked_cluster(bap, board, frame, swap=swap)
            if made is None:
                continue
            bad, what = made
            r = calibrate_with(inputs, options, bad)
            groups = getattr(r, "rejected_groups", None) or {}
            hit = [c for c in groups.get("clusters", []) if c["frame"] == what["frame"]
                   and c["node"] == what["labelled_node"]]
            hit += [f for f in groups.get("frames", []) if f["frame"] == what["frame"]]
            init = [f.reason for f in (r.extrinsics.frames if r.extrinsics else []) if f.frame == frame and not f.ok]
            mis.append({**what, "rejected_as_unit": bool(hit or init), "report": hit[0] if hit else None,
                        "frame_left_out_at_initialisation": init[0] if init else None, **deviation(r, clean)})
    out["mislinked_cluster"] = mis
    # Detections holding mislinked clusters (as the old linker left ~34 observations in 2 nodes)
    # and, on top, gross (u, v) errors.
    combined = []
    for seed in range(args.seeds):
        bad = bap
        for frame in frames_by_size[1:3]:
            made = with_mislinked_cluster(bad, board, frame, swap=False)
            if made is not None:
                bad = made[0]
        bad, n_bad = with_gross_uv(bad, inputs.frames, 0.03, seed)
        r = calibrate_with(inputs, options, bad)
        combined.append({"seed": seed, "n_corrupted": n_bad, **deviation(r, clean)})
    out["mislinked_clusters_and_gross_uv"] = {
        "frames_with_a_mislinked_cluster": [int(f) for f in frames_by_size[1:3]], "fraction": 0.03, "runs": combined,
        "all_within_3sigma": all(r["n_beyond_3sigma"] == 0 for r in combined),
        "max_deviation_sigma": max(r["max_deviation_sigma"] for r in combined),
    }
    frame = frames_by_size[0]
    r = calibrate_with(inputs, options, with_shuffled_frame(bap, frame))
    groups = getattr(r, "rejected_groups", None) or {}
    hit = [f for f in groups.get("frames", []) if f["frame"] == frame]
    init = [f for f in (r.extrinsics.frames if r.extrinsics else []) if f.frame == frame and not f.ok]
    out["mislabelled_frame"] = {"frame": int(frame), "rejected_as_frame": bool(hit), "report": hit[0] if hit else None,
                                "left_out_at_initialisation": init[0].reason if init else None,
                                "clusters_rejected_in_frame": sum(c["frame"] == frame for c in groups.get("clusters", [])),
                                **deviation(r, clean)}
    lin_inputs, lin_options = load(paths, loss="linear")
    r = calibrate_with(lin_inputs, lin_options, bap)
    lin: dict[str, Any] = {"converged": bool(r.converged), "F_mm": intrinsics(r)["F_mm"][0],
                           "d_mm": intrinsics(r)["d_mm"][0]}
    try:
        from plenocal.calib.plausibility import result_problems

        lin["result_problems"] = result_problems(
            r, nominal_focal_length_mm=lin_inputs.dataset.manifest.camera_spec.main_lens_focal_length_mm)
    except ImportError:
        lin["result_problems"] = None
    out["linear_clean"] = lin
    out["wall_s"] = time.perf_counter() - t_start
    print(json.dumps(out, indent=2, default=lambda o: dataclasses.asdict(o) if dataclasses.is_dataclass(o) else str(o)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
