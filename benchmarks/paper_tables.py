"""The paper's tables, reproduced on full-scale simulated datasets (markdown + JSON).

For each preset (default r12-a, r12-b, r12-c, r12-d, upc-s): simulate the dataset once (kept in
``--root``; ``plenocal simulate``), run the whole pipeline (``plenocal run``, resumable; wall time
and peak memory of the run are measured), then the ablation (``plenocal calibrate
--ablation-table``: configurations 1–8 and NOUR from the same initial camera). The tables follow
the paper's structure:

1. internal parameters from the white images (Δc, λ, m, q'_i) and κ, estimated vs true;
2. intrinsics: initial (pre-calibration) vs calibrated BAP (± σ) and NOUR vs the truth;
3. RMSE on the evaluation frames (held out, poses re-estimated): u, v and ρ;
4. ε_z on the controlled translation, mean ± std;
5. the ablation (8 configurations + NOUR): convergence, RMSE, F/D/d errors.

Usage::

    python benchmarks/paper_tables.py --root /data/plenocal-sim -o paper-tables
    python benchmarks/paper_tables.py --presets r12-a --root /data/plenocal-sim -o out

Prints the JSON document; writes ``OUT/paper_tables.md`` and ``OUT/paper_tables.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from plenocal.io import read_camera, read_camera_file, read_dataset
from plenocal.model.white import internal_parameters

PRESETS = ("r12-a", "r12-b", "r12-c", "r12-d", "upc-s")


def _cli(*args: str) -> tuple[float, float]:
    """Run ``plenocal ARGS``; return (wall time s, peak RSS of that child MB).

    ``os.wait4`` gives the usage of this child alone (RUSAGE_CHILDREN would report the largest
    of every child so far, e.g. an earlier simulation)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "plenocal", *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024.0


def _intrinsics(cam: Any) -> dict[str, float]:
    out = {
        "F_mm": cam.main_lens.focal_length_mm,
        "D_mm": cam.D_mm,
        "d_mm": cam.sensor.distance_mm - cam.D_mm,
        "u0_px": cam.sensor.principal_point_px[0],
        "v0_px": cam.sensor.principal_point_px[1],
    }
    for i, f in enumerate(cam.mla.focal_lengths_mm):
        out[f"f{i + 1}_mm"] = f
    return out


def _omega(om: Any) -> dict[str, Any]:
    return {
        "delta_c_um": 1e3 * om.micro_image_pitch_mm,
        "lambda": om.lambda_,
        "m_um": 1e3 * om.m_mm,
        "q_prime_um": [1e3 * x for x in om.q_prime_mm],
    }


def one(preset: str, root: Path, *, rays: int, seed: int, force: bool) -> dict[str, Any]:
    ds_dir = root / preset
    run_dir = root / f"{preset}-run"
    rec: dict[str, Any] = {"preset": preset, "dataset": str(ds_dir)}
    if not (ds_dir / "manifest.json").exists():
        wall, _ = _cli("simulate", preset, "-o", str(ds_dir), "--seed", str(seed), "--rays", str(rays), "--quiet")
        rec["simulate_s"] = wall
    wall, peak = _cli("run", str(ds_dir), "-o", str(run_dir), *(["--force"] if force else []))
    rec["run_wall_s"], rec["run_peak_mb"] = wall, peak
    rec["stages_s"] = {
        st: json.loads((run_dir / st / "stage.json").read_text()).get("wall_time_s")
        for st in ("precalibration", "detection", "calibration", "blur", "evaluation", "profile")
        if (run_dir / st / "stage.json").exists()
    }
    abl = run_dir / "ablation"
    if force or not (abl / "ablation.json").exists():
        wall, _ = _cli("calibrate", str(ds_dir), "-o", str(abl), "--observations", str(run_dir / "detection" / "observations.npz"),
                       "--initial", str(run_dir / "precalibration"), "--ablation-table")
        rec["ablation_s"] = wall
    ds = read_dataset(ds_dir)
    truth = read_camera(ds.path(ds.manifest.ground_truth.camera))
    true_omega = internal_parameters(truth)
    pre = read_camera_file(run_dir / "precalibration" / "camera.json")
    cal = json.loads((run_dir / "calibration" / "report.json").read_text())
    ev = json.loads((run_dir / "evaluation" / "report.json").read_text())
    kap = json.loads((run_dir / "blur" / "kappa.json").read_text()) if (run_dir / "blur" / "kappa.json").exists() else {}
    ablation = json.loads((abl / "ablation.json").read_text())
    rows = ablation["configurations"]
    nour = next((r for r in rows if r.get("configuration") == "NOUR"), {})
    rec["internals"] = {"estimated": _omega(pre.internal_parameters), "true": _omega(true_omega), "kappa": kap.get("kappa")}
    true_p = _intrinsics(truth)
    init_p = _intrinsics(pre.camera)
    bap = {k: v for k, v in cal["parameters"].items() if k in true_p}
    rec["intrinsics"] = {
        name: {
            "true": true_p[name],
            "initial": init_p.get(name),
            "bap": bap.get(name, {}).get("value"),
            "bap_std": bap.get(name, {}).get("std"),
            "nour": nour.get("parameters", {}).get(name, {}).get("value"),
        }
        for name in true_p
    }
    rec["calibration_rmse"] = cal["rmse"]
    rec["evaluation_rmse"] = ev.get("holdout", {}).get("rmse")
    rec["epsilon_z_percent"] = ev.get("translation", {}).get("epsilon_z_percent")
    rec["ablation"] = [
        {
            "configuration": r["configuration"],
            **{g: r.get(g) for g in ("tilt", "pitch", "distortion")},
            "converged": r.get("converged"),
            "rmse": r.get("rmse"),
            "error_percent": {
                n: 100.0 * (r["parameters"][n]["value"] - true_p[n]) / true_p[n]
                for n in ("F_mm", "D_mm", "d_mm") if n in r.get("parameters", {})
            },
        }
        for r in rows
    ]
    return rec


def _f(x: Any, fmt: str = ".4f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return format(x, fmt)


def _pct(x: Any) -> str:
    """Two decimals, or two significant digits below 0.1 (upc-s's ε_z is ~0.005 %)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return format(x, ".2g" if abs(x) < 0.1 else ".2f")


def _rel(est: Any, true: float, unit_px: bool) -> str:
    if est is None:
        return "—"
    return f"{est - true:+.2f} px" if unit_px else f"{100.0 * (est - true) / true:+.3f} %"


def markdown(doc: dict[str, Any]) -> str:
    out = ["# The paper's tables on simulated data", ""]
    out += ["## Internal parameters (white images) and κ", "",
            "| dataset | Δc (µm) est / true | λ est / true | m (µm) est / true | q'_i (µm) est | q'_i (µm) true | κ |",
            "|---|---|---|---|---|---|---|"]
    for r in doc["datasets"]:
        e, t = r["internals"]["estimated"], r["internals"]["true"]
        out.append(
            f"| {r['preset']} | {e['delta_c_um']:.4f} / {t['delta_c_um']:.4f} | {e['lambda']:.6f} / {t['lambda']:.6f} | "
            f"{e['m_um']:.3f} / {t['m_um']:.3f} | {', '.join(f'{x:.3f}' for x in e['q_prime_um'])} | "
            f"{', '.join(f'{x:.3f}' for x in t['q_prime_um'])} | {_f(r['internals']['kappa'], '.3f')} |")
    out += ["", "## Intrinsics: initial, calibrated (BAP ± σ, NOUR) and true", ""]
    for r in doc["datasets"]:
        out += [f"### {r['preset']}", "", "| parameter | initial | BAP | ± σ | NOUR | true | BAP error |", "|---|---|---|---|---|---|---|"]
        for name, v in r["intrinsics"].items():
            px = name.endswith("_px")
            fmt = ".3f" if px else ".6g"
            out.append(f"| {name} | {_f(v['initial'], fmt)} | {_f(v['bap'], fmt)} | {_f(v['bap_std'], '.2g')} | "
                       f"{_f(v['nour'], fmt)} | {_f(v['true'], fmt)} | {_rel(v['bap'], v['true'], px)} |")
        out.append("")
    out += ["## RMSE and ε_z", "",
            "| dataset | calibration uv (px) | calibration ρ (px) | evaluation uv (px) | evaluation ρ (px) | ε_z (%) | pairs | run (s) | peak (MB) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["datasets"]:
        c, e, z = r["calibration_rmse"], r["evaluation_rmse"] or {}, r["epsilon_z_percent"] or {}
        out.append(f"| {r['preset']} | {_f(c.get('uv_px'))} | {_f(c.get('rho_px'))} | {_f(e.get('uv_px'))} | {_f(e.get('rho_px'))} | "
                   f"{_pct(z.get('mean'))} ± {_pct(z.get('std'))} | {z.get('n_pairs', '—')} | {r['run_wall_s']:.0f} | {r['run_peak_mb']:.0f} |")
    out += ["", "## Ablation (configurations 1–8 of the paper, and NOUR)", ""]
    for r in doc["datasets"]:
        out += [f"### {r['preset']}", "", "| config | tilt | pitch | distortion | converged | RMSE uv | RMSE ρ | RMSE MIC | F err | D err | d err |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for a in r["ablation"]:
            rm = a.get("rmse") or {}
            er = a["error_percent"]
            out.append(f"| {a['configuration']} | {a.get('tilt')} | {a.get('pitch')} | {a.get('distortion')} | {a['converged']} | "
                       f"{_f(rm.get('uv_px'))} | {_f(rm.get('rho_px'))} | {_f(rm.get('mic_px'))} | "
                       + " | ".join(f"{er[n]:+.3f} %" if n in er else "—" for n in ("F_mm", "D_mm", "d_mm")) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--root", type=Path, required=True, help="folder of the simulated datasets and their runs")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--rays", type=int, default=96, help="rays per pixel when simulating (default 96)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--force", action="store_true", help="redo the runs (datasets are kept)")
    args = ap.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "paper_tables", "machine": machine(), "datasets": []}
    for name in args.presets.split(","):
        try:
            doc["datasets"].append(one(name.strip(), args.root, rays=args.rays, seed=args.seed, force=args.force))
        except subprocess.CalledProcessError as exc:
            # plenocal printed its one-line error above; finished stages are kept for a re-run.
            print(f"paper_tables: {name.strip()}: 'plenocal {exc.cmd[3]}' failed (exit {exc.returncode}); fix it and re-run", file=sys.stderr)
            return 2
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "paper_tables.json").write_text(json.dumps(doc, indent=2))
    (args.output / "paper_tables.md").write_text(markdown(doc))
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
