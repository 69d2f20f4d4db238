"""Benchmark: the reference's depth application (BLADE ``depth`` on libpleno) on the PRISM R12-B translation frames, against the truth. Prints JSON.

The same frames, truth and figures as ``benchmarks/depth.py`` (plenocal's depth), so the two can
be run side by side: the visible PRISM set (``../shared/validation/prism-r12b``, frames 100–104,
a fronto-parallel board at 450, 500, …, 650 mm), the truth camera in libpleno's format
(``camera/intrinsics.js`` + ``camera/params.js``, written by ``plenocal export-libpleno``).

BLADE has to be built first (``docs/reference-build.md``: libv + libpleno + BLADE's ``depth``
with the headless patch, and the ``dmdump`` helper that prints its depth maps). Each frame runs
in its own process (``xvfb-run -a depth -g false --save_all true --run_all true``) in a
temporary folder holding what BLADE needs: the frame and the N = 4 white as 3-channel 8-bit
PNGs (its devignetting and grey conversion read BGR), images.js, params.js with libpleno's κ
(σ² = κ·ρ², so plenocal's κ = 0.72 is 0.72² = 0.518) and strategy.js (the reference's
``examples/strategy.js`` — coarse, i.e. one depth per micro-image, golden-section search,
metric-space precision 0.01, virtual depths 2…18 — with the thread count given here; the
reference's default −1 means cores − 1, one thread on this machine).

Per frame: wall time of the process (loading, devignetting, estimation, writing its depth
maps and point cloud) and of the estimation alone (BLADE's own clock), the micro-images whose
line of sight meets the board's plate (truth pose, 5 mm inside its edges: ``depth.board_mask``),
of those the textured ones by plenocal's texture screen (the denominator ``benchmarks/depth.py``
uses), the fraction of them with a BLADE depth (coverage), and median / 90th percentile / signed
median of (z − z_true)/z over them, with z = libpleno's ``v2obj`` of BLADE's virtual depth (what
its point clouds use). BLADE's micro-images are matched to plenocal's labelling by their centres
(libpleno model pixels − 0.5 = the images' pixel indices). Also the same over every board
micro-image BLADE gave a depth (its own texture filter). Per pair of consecutive frames: the
displacement of the medians of z against the true 50 mm.

    python benchmarks/reference_depth.py --blade /work/refbuild/build-blade/depth \\
        --dmdump /work/refbuild/build-dmdump/dmdump [--threads 2] [--kappa 0.72] [--frames 100,101]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRISM_R12B, machine

import plenocal
from depth import board_mask
from plenocal.depth.matching import estimate_virtual_depths
from plenocal.detect.corners import devignette
from plenocal.io.camera import read_camera
from plenocal.io.images import read_raw_image

REFERENCE_STRATEGY = {
    # the reference's examples/strategy.js (blade 4ad9bee), nbthread set by --threads
    "multithread": True, "nbthread": -1, "virtual": True, "coarse": True, "init": "REGULAR_GRID",
    "randomize": False, "pairing": "CENTRALIZED", "filter": True, "belief": "NONE", "search": "GOLDEN_SECTION",
    "metricspace": True, "probabilistic": False, "precision": 0.01, "vmin": 2.0, "vmax": 18.0,
}
MAX_CENTRE_MISMATCH_PX = 0.5
"""A BLADE micro-image is given plenocal's label (k, l) of the nearest grid node; the truth
cameras' grids coincide (libpleno's centre − 0.5 px), so a larger distance means the wrong camera."""
ESTIMATION_TIME = re.compile(r"Estimation finished \(in ([0-9.eE+-]+) s\)")


def fail(message: str) -> NoReturn:
    """One line on stderr, exit code 2 (bad input or a failed external program)."""
    print(f"reference_depth: {message}", file=sys.stderr)
    sys.exit(2)


def rgb_png(src: Path, dst: Path) -> None:
    """Write a grey 8-bit PNG as 3 equal channels (BLADE devignets and converts from BGR)."""
    Image.open(src).convert("RGB").save(dst, compress_level=1)


def run_blade(blade: Path, dmdump: Path, folder: Path, *, frame: int, image: Path, white: Path, f_number: float,
              camera_js: Path, params: dict, strategy: dict, xvfb: bool, reuse: bool = False) -> dict:
    """Run BLADE's depth on one frame in ``folder``; its seconds and per micro-image depths (dmdump's columns).

    ``reuse``: a depth map already in ``folder`` (an earlier run kept with ``--keep``) is read
    instead of running BLADE again; the process time is then unknown (None).
    """
    log = folder / "blade.log"
    maps = sorted(folder.glob(f"dm-blade-{frame}-*.bin.gz"))
    if reuse and maps and log.is_file():
        m = ESTIMATION_TIME.search(log.read_text(errors="replace"))
        return {"seconds_process": None, "seconds_estimation": float(m.group(1)) if m else None, "exit_code": None,
                **dump_map(dmdump, folder, maps[-1], camera_js, xvfb=xvfb)}
    rgb_png(image, folder / "frame.png")
    rgb_png(white, folder / "white.png")
    (folder / "images.js").write_text(json.dumps({
        "meta": {"debayered": True, "rgb": True, "format": 8},
        "images": [{"path": "frame.png", "fnumber": f"{f_number}", "frame": frame}],
        "mask": {"path": "white.png", "fnumber": f"{f_number}"},
    }, indent=1))
    (folder / "params.js").write_text(json.dumps(params, indent=1))
    (folder / "strategy.js").write_text(json.dumps(strategy, indent=1))
    cmd = [str(blade), "-i", "images.js", "-c", str(camera_js), "-p", "params.js", "-s", "strategy.js",
           "-g", "false", "-v", "true", "-l", "7", "--save_all", "true", "--run_all", "true"]
    if xvfb:
        cmd = ["xvfb-run", "-a", *cmd]
    for stale in maps:
        stale.unlink()
    with log.open("w") as f:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=folder, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    maps = sorted(folder.glob(f"dm-blade-{frame}-*.bin.gz"))
    if not maps:
        fail(f"BLADE wrote no depth map for frame {frame} (exit {proc.returncode}); log: {log}")
    m = ESTIMATION_TIME.search(text)
    return {"seconds_process": wall, "seconds_estimation": float(m.group(1)) if m else None,
            "exit_code": proc.returncode, **dump_map(dmdump, folder, maps[0], camera_js, xvfb=xvfb)}


def dump_map(dmdump: Path, folder: Path, dm: Path, camera_js: Path, *, xvfb: bool) -> dict:
    """BLADE's depth map through dmdump: (M, 2) centres (libpleno px), confidence, virtual depth, z (mm)."""
    cmd = [str(dmdump), str(camera_js), "params.js", dm.name]
    if xvfb:  # libpleno starts its Qt viewer in a static initialiser, in every program linked to it
        cmd = ["xvfb-run", "-a", *cmd]
    dump = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    if dump.returncode != 0:
        fail(f"dmdump failed on {folder / dm.name} (exit {dump.returncode}): {dump.stderr.strip()[-300:]}")
    rows = [line.split() for line in dump.stdout.splitlines() if line and not line.startswith("#")]
    cols = np.array(rows, dtype=np.float64).reshape(-1, 8)
    return {"centres": cols[:, 2:4], "confidence": cols[:, 5], "virtual_depth": cols[:, 6], "z": cols[:, 7]}


def figures(z: np.ndarray, z_true: float) -> dict:
    rel = (z - z_true) / z_true
    if len(rel) == 0:
        return {"median_abs_rel_error_pct": None, "p90_abs_rel_error_pct": None, "signed_median_rel_error_pct": None}
    return {"median_abs_rel_error_pct": float(100 * np.median(np.abs(rel))),
            "p90_abs_rel_error_pct": float(100 * np.percentile(np.abs(rel), 90)),
            "signed_median_rel_error_pct": float(100 * np.median(rel))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blade", type=Path, required=True, help="BLADE's built depth executable")
    ap.add_argument("--dmdump", type=Path, required=True, help="the dmdump helper (prints a BLADE depth map)")
    ap.add_argument("--set", type=Path, default=PRISM_R12B)
    ap.add_argument("--camera-js", type=Path, default=None, help="libpleno intrinsics.js (default: the set's truth)")
    ap.add_argument("--params-js", type=Path, default=None, help="libpleno params.js (default: the set's truth)")
    ap.add_argument("--camera", type=Path, default=None,
                    help="the same camera in plenocal's format, for the board mask and labels (default: the truth, image-index pixels)")
    ap.add_argument("--kappa", type=float, default=0.72, help="plenocal's κ (σ = κρ); BLADE gets κ² (σ² = κρ²)")
    ap.add_argument("--threads", type=int, default=2, help="BLADE's nbthread (its default −1 is cores − 1)")
    ap.add_argument("--strategy", type=Path, default=None, help="a strategy.js instead of the reference's example")
    ap.add_argument("--frames", default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep BLADE's outputs in this folder")
    ap.add_argument("--reuse", action="store_true", help="with --keep: score the depth maps already there instead of running BLADE")
    args = ap.parse_args()

    for exe in (args.blade, args.dmdump):
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            fail(f"{exe} is not an executable; build it as docs/reference-build.md says")
    xvfb = not os.environ.get("DISPLAY")
    if xvfb and shutil.which("xvfb-run") is None:
        fail("no DISPLAY and no xvfb-run: BLADE's viewer needs an X server (apt-get install xvfb xauth)")
    truth = json.loads((args.set / "truth.json").read_text())
    camera_js = (args.camera_js or args.set / "camera" / "intrinsics.js").resolve()
    params = json.loads((args.params_js or args.set / "camera" / "params.js").read_text())
    params["kappa"] = f"{args.kappa ** 2!r}"
    strategy = json.loads(args.strategy.read_text()) if args.strategy else dict(REFERENCE_STRATEGY)
    if args.strategy is None:
        strategy["nbthread"] = args.threads
    camera_path = args.camera or args.set / "camera" / "camera-true-image-index.json"
    camera = read_camera(camera_path)
    grid = camera.grid
    k_all, l_all = grid.lattice.all_indices()
    k0, l0 = int(k_all.min()), int(l_all.min())
    lut = np.full((int(k_all.max()) - k0 + 1, int(l_all.max()) - l0 + 1), -1, dtype=np.int64)
    lut[k_all - k0, l_all - l0] = np.arange(len(k_all))  # (k, l) → position in all_indices
    plate_size = truth["checkerboard"]["plate_size_mm"]
    white_path = args.set / truth["devignetting_white"]  # the white at the frames' f-number (N = 4)
    white_grey = read_raw_image(white_path)
    wanted = None if args.frames is None else {int(x) for x in args.frames.split(",")}

    results, medians = [], {}
    work = Path(tempfile.mkdtemp(prefix="plenocal-refdepth-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    try:
        for name in truth["translation"]["frames"]:
            info = truth["checkerboards"][name]
            frame = int(info["frame"])
            if wanted is not None and frame not in wanted:
                continue
            folder = work / f"frame-{frame}"
            folder.mkdir(exist_ok=True)
            out = run_blade(args.blade, args.dmdump, folder, frame=frame, image=args.set / name, white=white_path,
                            f_number=float(info["fnumber"]), camera_js=camera_js, params=params, strategy=strategy, xvfb=xvfb,
                            reuse=args.reuse)
            # plenocal's labels for BLADE's micro-images
            c = out["centres"] - 0.5
            kk, ll = grid.nearest(c[:, 0], c[:, 1])
            mismatch = np.linalg.norm(grid.centres(kk, ll) - c, axis=1)
            if len(c) and mismatch.max() > MAX_CENTRE_MISMATCH_PX:
                fail(f"BLADE's micro-image centres are up to {mismatch.max():.2f} px off {camera_path}'s grid; "
                         "give --camera the same camera as --camera-js")
            inb = (kk >= k0) & (kk - k0 < lut.shape[0]) & (ll >= l0) & (ll - l0 < lut.shape[1])
            idx = np.full(len(kk), -1, dtype=np.int64)
            idx[inb] = lut[kk[inb] - k0, ll[inb] - l0]
            has = np.zeros(len(k_all), dtype=bool)
            z = np.full(len(k_all), np.nan)
            conf = np.full(len(k_all), np.nan)
            ok_idx = idx >= 0
            has[idx[ok_idx]] = True
            z[idx[ok_idx]] = out["z"][ok_idx]
            conf[idx[ok_idx]] = out["confidence"][ok_idx]
            # the board's micro-images and plenocal's texture screen (no matching: empty subset)
            dv, weight = devignette(read_raw_image(args.set / name), white_grey)
            screen = estimate_virtual_depths(dv, weight, camera, kappa=args.kappa, f_number=float(info["fnumber"]),
                                             subset=np.zeros(len(k_all), dtype=bool))
            R = np.array(info["plate_in_camera"]["R"])
            t = np.array(info["plate_in_camera"]["t"])
            z_true = float(t[2])
            onb = board_mask(camera, k_all, l_all, R, t, plate_size)
            tex = onb & screen.textured
            ok = tex & has
            anyb = onb & has
            medians[frame] = (float(np.median(z[ok])) if ok.any() else float("nan"), z_true)
            row = {"frame": frame, "image": name, "z_true_mm": z_true, "board_micro_images": int(onb.sum()),
                   "textured": int(tex.sum()), "seconds": out["seconds_process"],
                   "seconds_estimation": out["seconds_estimation"], "exit_code": out["exit_code"],
                   "blade_micro_images_with_depth": len(c),
                   "per_micro_image": {"with_depth": int(ok.sum()), "coverage": float(ok.sum() / max(tex.sum(), 1)),
                                       **figures(z[ok], z_true),
                                       "median_confidence": float(np.median(conf[ok])) if ok.any() else None},
                   "any_board_micro_image": {"with_depth": int(anyb.sum()), "coverage": float(anyb.sum() / max(onb.sum(), 1)),
                                             **figures(z[anyb], z_true)}}
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    pairs = []
    ids = sorted(medians)
    for a, b in itertools.pairwise(ids):
        d_est = medians[b][0] - medians[a][0]
        d_true = medians[b][1] - medians[a][1]
        pairs.append({"estimate": "per_micro_image", "frames": [a, b], "displacement_true_mm": d_true,
                      "displacement_mm": d_est, "error_pct": float(100 * abs(d_est - d_true) / abs(d_true))})
    print(json.dumps({
        "benchmark": "reference_depth", "plenocal_version": plenocal.__version__, "machine": machine(),
        "load_average": os.getloadavg(), "set": str(args.set), "blade": str(args.blade), "camera_js": str(camera_js),
        "camera": str(camera_path), "kappa_plenocal": args.kappa, "kappa_libpleno": args.kappa ** 2,
        "strategy": strategy, "frames": results, "pairs": pairs,
    }, indent=1))


if __name__ == "__main__":
    main()
