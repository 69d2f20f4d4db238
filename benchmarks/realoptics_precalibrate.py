"""Pre-calibration on the real-optics R12-B whites against the set's paraxial truth, and where Ω's
departure from the paraxial radius law comes from. Prints JSON.

Usage: python benchmarks/realoptics_precalibrate.py [--set DIR] [--skip-noise] [--skip-rays]

- ``precalibration``: :func:`precalibrate` on the set's four whites as a user would run it (the
  dataset's nominal camera_spec): time, the grid against the paraxial micro-image pitch, the
  micro-images left out per white (:mod:`plenocal.precalib.conformity`), the type layout against
  the truth's, Ω at the lattice centre against the paraxial truth (m = −(F − e)·d/(2·D_xp),
  q_i = r_c·(d/f_i − 1 − d/D_xp), q'_i = q_i + Δc/2), the initial camera;
- ``noise``: the same whites with extra render-like noise, seeded (the set's README: 7 % per pixel
  at 16 samples, 10 % at 8): zero-mean multiplicative (7.1 % brings it to the 8-sample level,
  10 % and 30 % beyond) and photon-like (its relative σ at the bright level, 1/√I towards dim
  pixels: 20 %), and whether pre-calibration refuses them;
- ``estimator``: Ω refitted on subsets of the conforming micro-images (central discs, pairs of
  f-numbers), with the pixel term fixed at its true 1/12 px² (100 % fill factor) instead of the
  profile's, and with every micro-image kept (the conformity test disabled);
- ``real_rays``: the radius law that real rays give (``_realrays``: Snell through the truth's
  prescription), effect by effect — the paraxial formulas (the Monte-Carlo check), the main lens
  (pupil aberration) with and without the plate's cos⁴, the thick lenslet, both (also sampled
  without the virtual pupil, and per pair of f-numbers) — at the axis and off it (its change
  across the sensor).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine
from _realrays import RealOptics

from plenocal.io.dataset import read_dataset
from plenocal.model.camera import Configuration
from plenocal.precalib import internals as I
from plenocal.precalib import pipeline
from plenocal.precalib.centres import clean_image, flatten
from plenocal.precalib.conformity import Conformity
from plenocal.precalib.pipeline import PrecalibrationError, WhiteImage, precalibrate

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT.parent / "shared" / "validation" / "realoptics-r12b"
USED = ["5.66", "8", "11.31"]


def pct(a: float, b: float) -> float:
    return 100.0 * (a / b - 1.0)


def load(set_dir: Path):
    from plenocal.cli.precalibrate import checkerboard_f_number, load_whites

    with tempfile.TemporaryDirectory() as tmp:
        code = subprocess.run([sys.executable, "-m", "plenocal", "import-libpleno", str(set_dir / "libpleno-src"), "-o", tmp],
                              capture_output=True, text=True).returncode
        if code:
            raise SystemExit(f"import-libpleno {set_dir / 'libpleno-src'} failed")
        ds = read_dataset(Path(tmp))
        return load_whites(ds), ds.manifest.camera_spec, checkerboard_f_number(ds)


def omega_at(omega, uv_px, n_types: int) -> tuple[float, np.ndarray, np.ndarray]:
    m, q = omega.local(np.repeat(np.asarray(uv_px, dtype=float)[None], n_types, axis=0), np.arange(n_types))
    return float(m[0]), q, q + omega.micro_image_pitch_mm / 2


def type_map(pc, ro: RealOptics) -> tuple[list[int], float]:
    """plenocal type → truth type (majority over the MIC observations), and the agreement."""
    uv = np.stack([pc.mic.u, pc.mic.v], axis=1)
    ours = pc.types.layout.type_of(pc.mic.k, pc.mic.l)
    theirs = ro.truth_type(uv)
    mapping = [int(np.bincount(theirs[ours == i], minlength=3).argmax()) for i in range(3)]
    return mapping, float(np.mean(np.asarray(mapping)[ours] == theirs))


def compare_omega(omega, ro: RealOptics, mapping: list[int]) -> dict[str, Any]:
    par = ro.paraxial_omega()
    m, q, qp = omega_at(omega, ro.lattice_centre_px, 3)
    return {"m_error_percent": pct(m, par["m_mm"]),
            "q_error_percent": [pct(q[i], par["q_mm"][mapping[i]]) for i in range(3)],
            "q_prime_error_percent": [pct(qp[i], par["q_prime_mm"][mapping[i]]) for i in range(3)],
            "truth_type_of_each_type": mapping}


def summary(pc, ro: RealOptics, wall: float) -> dict[str, Any]:
    mapping, agree = type_map(pc, ro)
    g = pc.grid_fit
    cam = pc.camera
    t = ro.truth
    return {
        "wall_s": wall,
        "grid": {"rms_px": g.rms_px, "rms_all_px": pc.grid_rms_all_px, "n_linked": len(g.uv),
                 "pitch_error_percent": [pct(p, ro.micro_image_pitch_px()) for p in g.grid.pitch_px]},
        "excluded": {f"{N:g}": {"n": len(c.k), "excluded": int((~c.ok).sum()), "dark": int(c.dark.sum()),
                                "anisotropic": int(c.anisotropic.sum()), "off_lattice": int(c.off_lattice.sum())}
                     for N, c in sorted(pc.conformity.items())},
        "types": {"confidence": pc.types.confidence, "confusion": pc.internals.type_confusion, "agreement_with_truth": agree},
        "apertures_used": [d.f_number for d in pc.internals.apertures if d.used],
        "pixel_variance_px2": pc.internals.pixel_variance_px2,
        "omega_vs_paraxial": compare_omega(pc.omega, ro, mapping),
        "initial_camera_error_percent": {
            "D": pct(cam.D_mm, ro.D), "d": pct(cam.d_mm, ro.d),
            "f": [pct(cam.mla.focal_lengths_mm[i], t["mla"]["types"][mapping[i]]["f_paraxial_mm"]) for i in range(3)]},
        "initial_tilt_urad": [1e6 * x for x in cam.mla.rotation_xyz_rad[:2]],
        "true_tilt_urad": [1e6 * t["mla"]["tilt_rad"]["about_x"], 1e6 * t["mla"]["tilt_rad"]["about_y"]],
    }


def noisy(image: np.ndarray, level: float, kind: str, rng: np.random.Generator) -> np.ndarray:
    """8-bit ``image`` (floats in [0, 1]) with extra zero-mean noise, requantised to 8 bits."""
    img = np.asarray(image, dtype=np.float64)
    if kind == "multiplicative":
        out = img * (1.0 + level * rng.standard_normal(img.shape))
    else:  # photon-like: relative σ = level at the bright level, ∝ 1/√I below it
        bright = float(np.percentile(img[img > 0], 99))
        out = img + level * np.sqrt(img * bright) * rng.standard_normal(img.shape)
    return np.clip(np.rint(255.0 * out), 0, 255) / 255.0


def noise_runs(whites, spec, n_cb, ro) -> list[dict[str, Any]]:
    out = []
    for kind, level in (("multiplicative", 0.071), ("multiplicative", 0.10), ("multiplicative", 0.30), ("photon-like", 0.20)):
        rng = np.random.default_rng(20261125)
        nw = [WhiteImage(w.f_number, noisy(w.image, level, kind, rng), w.name) for w in whites]
        entry: dict[str, Any] = {"kind": kind, "level": level}
        try:
            t0 = time.perf_counter()
            pc = precalibrate(nw, spec, checkerboard_f_number=n_cb)
            s = summary(pc, ro, time.perf_counter() - t0)
            entry.update({k: s[k] for k in ("grid", "types", "omega_vs_paraxial")})
        except PrecalibrationError as exc:
            entry["refused"] = str(exc)
        out.append(entry)
    return out


def refit(pc, flats, ro: RealOptics, mapping, *, keep=None, f_numbers=None, pixel_variance=None) -> dict[str, Any]:
    """Ω from the conforming moments restricted to ``keep(moments) → mask`` and ``f_numbers``."""
    moments = {N: (m.select(keep(m)) if keep else m) for N, m in pc.moments.items() if f_numbers is None or N in f_numbers}
    types = {N: pc.types.layout.type_of(m.k, m.l) for N, m in moments.items()}
    s = pc.camera.sensor.pixel_size_mm
    args = dict(n_types=3, pixel_size_mm=s, micro_image_pitch_px=pc.grid_fit.grid.diameter_px,
                configuration=Configuration.GALILEAN, f_number=4.0, reference_uv_px=tuple(ro.lattice_centre_px),
                images={N: flats[N] for N in moments})
    if pixel_variance is None:
        fit = I.fit_internals(moments, types, **args)
        omega = fit.omega
        n = {f"{N:g}": len(m.k) for N, m in moments.items()}
        return {"n": n, "apertures_used": [d.f_number for d in fit.apertures if d.used],
                **compare_omega(omega, ro, mapping)}
    # The variance law with the pixel term fixed (no profile fit), over the used apertures.
    used = [N for N in sorted(moments) if N > 4.5]
    inv_n2, pos, typ, y = I._variance_rows(moments, types, used, s)
    duv = pos - ro.lattice_centre_px
    p, *_ = I._law_fit(inv_n2, duv, typ, y, 3, offset_mm2=4 * pixel_variance * s * s, blur_scale=1.0)
    from plenocal.model.white import InternalParameters

    om = InternalParameters(m_mm=-abs(p[0]), q_mm=tuple(-abs(p[3 + 3 * i]) for i in range(3)),
                            micro_image_pitch_mm=s * pc.grid_fit.grid.diameter_px, pixel_size_mm=s)
    return {"pixel_variance_px2": pixel_variance, **compare_omega(om, ro, mapping)}


def estimator_runs(pc, whites, ro: RealOptics, spec, n_cb) -> dict[str, Any]:
    mapping, _ = type_map(pc, ro)
    flats = {w.f_number: flatten(clean_image(w.image), pc.grid_fit.grid.diameter_px) for w in whites}
    pp = ro.lattice_centre_px
    s = pc.camera.sensor.pixel_size_mm

    def disc(r_mm):
        return lambda m: np.hypot(*(m.centre_px - pp).T) * s < r_mm

    out: dict[str, Any] = {"default": compare_omega(pc.omega, ro, mapping)}
    for r in (2.0, 3.0, 4.0):
        out[f"central_{r:g}mm"] = refit(pc, flats, ro, mapping, keep=disc(r))
    ns = sorted(N for N in pc.moments if N > 4.5)
    for a in range(len(ns)):
        for b in range(a + 1, len(ns)):
            out[f"pair_{ns[a]:g}_{ns[b]:g}"] = refit(pc, flats, ro, mapping, f_numbers={ns[a], ns[b]})
    out["pixel_term_1_12"] = refit(pc, flats, ro, mapping, pixel_variance=1.0 / 12.0)
    out["pixel_term_0"] = refit(pc, flats, ro, mapping, pixel_variance=0.0)

    def keep_all(moments, mass, lattice, image_shape, *, f_number):
        z = np.zeros(len(moments.k), dtype=bool)
        return Conformity(f_number, moments.k, moments.l, moments.centre_px, z, z, z, 0.0, 0.0)

    real = pipeline.conformity
    pipeline.conformity = keep_all
    try:
        pc_all = precalibrate(whites, spec, checkerboard_f_number=n_cb)
        m_all, _ = type_map(pc_all, ro)
        out["no_exclusion"] = {"grid_rms_px": pc_all.grid_fit.rms_px, "type_confidence": pc_all.types.confidence,
                               **compare_omega(pc_all.omega, ro, m_all)}
    except PrecalibrationError as exc:
        out["no_exclusion"] = {"refused": str(exc)}
    finally:
        pipeline.conformity = real
    return out


def ray_runs(ro: RealOptics) -> dict[str, Any]:
    par = ro.paraxial_omega()
    dc = par["micro_image_pitch_mm"]

    def rel(law):
        m = float(np.mean(law["m_mm"]))
        return {"m_error_percent": pct(-m, par["m_mm"]),
                "q_prime_error_percent": [pct(dc / 2 - q, par["q_prime_mm"][i]) for i, q in enumerate(law["q_mm"])]}

    out: dict[str, Any] = {"f_numbers": USED}
    for name, kw in (("paraxial_monte_carlo_check", dict(real_main=False, real_lenslet=False)),
                     ("main_lens_without_cos4", dict(real_lenslet=False, cos4=False)),
                     ("main_lens", dict(real_lenslet=False)),
                     ("lenslet", dict(real_main=False)),
                     ("both", {})):
        out[name] = rel(ro.radius_law(USED, 0.0, **kw))
    out["both_joint_sampling"] = rel(ro.radius_law_joint(USED))
    for a in range(len(USED)):
        for b in range(a + 1, len(USED)):
            out[f"both_{USED[a]}_{USED[b]}"] = rel(ro.radius_law([USED[a], USED[b]], 0.0))
    field = []
    for x in (2.0, 4.0, 6.0, 8.0):
        law = ro.radius_law(USED, x)
        field.append({"x_mm": x, **rel(law), "anisotropy_type0": law["anisotropy"][0]})
    out["both_off_axis"] = field
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", type=Path, default=SET)
    ap.add_argument("--skip-noise", action="store_true")
    ap.add_argument("--skip-rays", action="store_true")
    args = ap.parse_args()
    ro = RealOptics(args.set)
    whites, spec, n_cb = load(args.set)
    t0 = time.perf_counter()
    pc = precalibrate(whites, spec, checkerboard_f_number=n_cb)
    result: dict[str, Any] = {"benchmark": "realoptics_precalibrate", "set": str(args.set),
                              "paraxial_truth": ro.paraxial_omega() | {"micro_image_pitch_px": ro.micro_image_pitch_px()},
                              "precalibration": summary(pc, ro, time.perf_counter() - t0)}
    if not args.skip_noise:
        result["noise"] = noise_runs(whites, spec, n_cb, ro)
    result["estimator"] = estimator_runs(pc, whites, ro, spec, n_cb)
    if not args.skip_rays:
        result["real_rays"] = ray_runs(ro)
    result["machine"] = machine()
    print(json.dumps(result, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
