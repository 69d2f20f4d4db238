"""Real rays through the R12-B real-optics validation set's prescription (its ``truth.json``), for
benchmarks only: Snell's law at every spherical surface of the main lens (traced backwards from a
lenslet, clipped by every semi-diameter and the stop), and through one thick plano-convex lenslet
(forward to the sensor, clipped by its mask). Shares nothing with plenocal.

Used to say what a white micro-image's radius law *is* on that camera, effect by effect, against
the paraxial formulas (m = −(F − e)·d/(2·D_xp), q_i = r_c·(d/f_i − 1 − d/D_xp)).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FloatArray = np.ndarray


class RealOptics:
    """The camera of ``truth.json``: main-lens surfaces, stop per f-number, lenslet types."""

    def __init__(self, set_dir: Path) -> None:
        t = json.loads((Path(set_dir) / "truth.json").read_text())
        self.truth = t
        ml = t["main_lens"]
        self.surfaces = ml["surfaces"]
        self.stop_radius = {k: float(v) for k, v in ml["stop_semi_diameter_per_fnumber"].items()}
        self.f_numbers = {k: float(v["fnumber_exact"]) for k, v in ml["paraxial_per_fnumber"].items()}
        tl = t["thin_lens_equivalent"]
        self.F = float(tl["F_mm"])
        self.e = -float(tl["exit_pupil_minus_Hp_mm_towards_scene"])  # exit pupil behind H′
        mla = t["mla"]
        self.types = mla["types"]
        self.n_glass = float(mla["glass_nd"])
        self.r_clear = float(mla["clear_aperture_radius_mm"])
        self.substrate = float(mla["substrate_thickness_mm"])
        self.gap = float(mla["air_gap_rear_face_to_sensor_at_lattice_centre_mm"])
        self.pitch_mm = float(mla["pitch_mm"])
        self.row_spacing_mm = float(mla["row_spacing_mm"])
        self.lattice_offset_mm = np.asarray(mla["lattice_centre_offset_from_axis_mm"], dtype=float)
        s = t["sensor"]
        self.pixel_mm = float(s["pixel_mm"])
        self.principal_point_px = np.asarray(s["principal_point_px"], dtype=float)
        self.lattice_centre_px = np.asarray(mla["lattice_centre_on_sensor_px"], dtype=float)
        self.D = float(tl["D_Hp_to_lenslet_H_mm_mean"])
        self.d = float(tl["d_effective_mm_mean"])

    # --- paraxial -------------------------------------------------------------------------
    def d_xp(self, i: int | None = None) -> float:
        D = self.D if i is None else float(self.types[i]["D_Hp_main_to_H_lenslet_mm"])
        return D - self.e

    def micro_image_pitch_px(self) -> float:
        """Paraxial micro-image pitch at the lattice centre (lens pitch · (D_xp + d)/D_xp)."""
        return self.pitch_mm * (self.d_xp() + self.d) / self.d_xp() / self.pixel_mm

    def paraxial_omega(self) -> dict[str, object]:
        """m (mean d), per type m, q_i and q'_i = q_i + Δc/2 (mm), Galilean signs."""
        dc = self.micro_image_pitch_px() * self.pixel_mm
        out: dict[str, list[float]] = {"m_per_type_mm": [], "q_mm": [], "q_prime_mm": []}
        for i, ty in enumerate(self.types):
            d, f, dxp = float(ty["d_effective_Hp_to_sensor_mm"]), float(ty["f_paraxial_mm"]), self.d_xp(i)
            out["m_per_type_mm"].append(-(self.F - self.e) * d / (2 * dxp))
            q = self.r_clear * (d / f - 1 - d / dxp)
            out["q_mm"].append(q)
            out["q_prime_mm"].append(q + dc / 2)
        return {"m_mm": -(self.F - self.e) * self.d / (2 * self.d_xp()), **out, "micro_image_pitch_mm": dc}

    def truth_type(self, uv_px: FloatArray) -> np.ndarray:
        """The truth's lenslet type behind micro-images at (u, v) (paraxial inverse projection)."""
        scale = (self.d_xp() + self.d) / self.d_xp()
        lab = (np.asarray(uv_px, dtype=float) - self.principal_point_px) * self.pixel_mm / scale
        x, y = (lab - self.lattice_offset_mm).T
        l = np.rint(y / self.row_spacing_mm + 75.5).astype(np.int64)
        k = np.rint(x / self.pitch_mm + 88.25 - 0.5 * (l % 2)).astype(np.int64)
        return (k - l // 2 - l) % 3

    # --- main lens, backwards ---------------------------------------------------------------
    def _trace_back(self, p: FloatArray, d: FloatArray, stop_radius: float) -> np.ndarray:
        """Which rays from points ``p`` (M, 3, lab, z towards the scene) along unit ``d`` pass
        every surface from the sensor side to the scene (Snell, semi-diameters, stop, TIR)."""
        p, d = p.copy(), d.copy()
        alive = np.ones(len(p), dtype=bool)
        for j in range(len(self.surfaces) - 1, -1, -1):
            s = self.surfaces[j]
            zv = float(s["vertex_lab_z_mm"])
            n_after = float(s["index_after_nd"])
            n_before = 1.0 if j == 0 else float(self.surfaces[j - 1]["index_after_nd"])
            if s["radius_mm"] is None:  # the stop
                t = (zv - p[:, 2]) / d[:, 2]
                p = p + t[:, None] * d
                alive &= np.hypot(p[:, 0], p[:, 1]) <= stop_radius
                continue
            R = float(s["radius_mm"])
            q = p - np.array([0.0, 0.0, zv])
            b = np.sum(q * d, axis=1) + R * d[:, 2]
            c = np.sum(q * q, axis=1) + 2 * R * q[:, 2]
            disc = b * b - c
            alive &= disc >= 0
            sq = np.sqrt(np.maximum(disc, 0.0))
            t1, t2 = -b - sq, -b + sq
            t = np.where(np.abs(q[:, 2] + t1 * d[:, 2]) < np.abs(q[:, 2] + t2 * d[:, 2]), t1, t2)
            hit = p + t[:, None] * d
            alive &= np.hypot(hit[:, 0], hit[:, 1]) <= float(s["semi_diameter_mm"])
            nrm = (hit - np.array([0.0, 0.0, zv - R])) / R
            nrm *= -np.sign(np.sum(nrm * d, axis=1))[:, None]
            d, ok = _refract(d, nrm, n_after / n_before)
            alive &= ok
            p = hit
        return alive

    def pupil_slopes(self, x_mm: float, f_key: str, *, real: bool = True, cos4: bool = True,
                     n: int = 501) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Slopes (t_x, t_y) of the light reaching a lenslet at (x, 0) from the white plate, and
        their irradiance weights (cos⁴ on a uniform grid in slope space: a Lambertian plate's
        radiance; ``cos4=False``: uniform). ``real=False``: the paraxial exit pupil."""
        N = self.f_numbers[f_key]
        centre = x_mm / self.d_xp()
        span = 0.14 * 4.0 / N
        g = np.linspace(-span, span, n)
        tx, ty = np.meshgrid(centre + g, g)
        tx, ty = tx.ravel(), ty.ravel()
        if real:
            d = np.stack([-tx, -ty, np.ones_like(tx)], axis=1)
            d /= np.linalg.norm(d, axis=1)[:, None]
            z_lenslet = float(self.types[0]["vertex_z_lab_at_lattice_centre"])
            ok = self._trace_back(np.tile([x_mm, 0.0, z_lenslet], (len(tx), 1)), d, self.stop_radius[f_key])
            w = 1.0 / (1.0 + tx**2 + ty**2) ** 2 if cos4 else np.ones_like(tx)
        else:
            r_xp = (self.F - self.e) / (2 * N)
            ok = np.hypot(tx - centre, ty) * self.d_xp() <= r_xp
            w = np.ones_like(tx)
        return tx[ok], ty[ok], w[ok]

    # --- one lenslet, forwards --------------------------------------------------------------
    def micro_image(self, i: int, f_key: str, x_mm: float = 0.0, *, real_main: bool = True, real_lenslet: bool = True,
                    cos4: bool = True, n: int = 2_000_000, seed: int = 1) -> tuple[FloatArray, FloatArray]:
        """Landing points (px, relative to the lenslet centre) of light from the white plate through
        lenslet type ``i`` at (x, 0): the white micro-image (no pixel area, no noise)."""
        rng = np.random.default_rng(seed)
        ty_ = self.types[i]
        d, f, dxp = float(ty_["d_effective_Hp_to_sensor_mm"]), float(ty_["f_paraxial_mm"]), self.d_xp(i)
        tx, tyy, w = self.pupil_slopes(x_mm, f_key, real=real_main, cos4=cos4)
        j = rng.choice(len(tx), size=n, p=w / w.sum())
        # Each slope as a point of a virtual pupil at the paraxial exit-pupil distance (relative to
        # the lenslet: an off-axis lenslet sees the pupil obliquely).
        px_, py_ = -tx[j] * dxp, -tyy[j] * dxp
        if not real_lenslet:
            a = rng.uniform(0, 2 * np.pi, n)
            r = self.r_clear * np.sqrt(rng.uniform(0, 1, n))
            k = d / f - 1 - d / dxp
            return (-px_ * d / dxp + r * np.cos(a) * k) / self.pixel_mm, (-py_ * d / dxp + r * np.sin(a) * k) / self.pixel_mm
        R, sag = float(ty_["radius_mm"]), float(ty_["sag_mm"])
        zv = self.substrate + sag
        zc = zv - R
        P = np.stack([px_, py_, np.full(n, zv + dxp)], axis=1)
        a = rng.uniform(0, 2 * np.pi, n)
        r = 1.1 * self.r_clear * np.sqrt(rng.uniform(0, 1, n))
        sx, sy = r * np.cos(a), r * np.sin(a)
        S = np.stack([sx, sy, zc + np.sqrt(R * R - sx**2 - sy**2)], axis=1)
        dd = S - P
        dd /= np.linalg.norm(dd, axis=1)[:, None]
        d2, ok = _refract(dd, (S - np.array([0.0, 0.0, zc])) / R, 1.0 / self.n_glass)
        base = S + ((self.substrate - S[:, 2]) / d2[:, 2])[:, None] * d2
        ok &= np.hypot(base[:, 0], base[:, 1]) <= self.r_clear
        rear = S + ((0.0 - S[:, 2]) / d2[:, 2])[:, None] * d2
        d3, ok2 = _refract(d2, np.tile([0.0, 0.0, 1.0], (n, 1)), self.n_glass)
        ok &= ok2
        land = rear + ((-self.gap - rear[:, 2]) / d3[:, 2])[:, None] * d3
        return land[ok, 0] / self.pixel_mm, land[ok, 1] / self.pixel_mm

    def micro_image_joint(self, i: int, f_key: str, *, n: int = 3_000_000, seed: int = 2) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The central micro-image without the virtual pupil of :meth:`micro_image`: a point on the
        lenslet and an arrival slope drawn jointly, the main lens traced back from that point.
        Landing points (px) and their weights (cos⁴)."""
        rng = np.random.default_rng(seed)
        ty_ = self.types[i]
        R, sag = float(ty_["radius_mm"]), float(ty_["sag_mm"])
        zv = self.substrate + sag
        zc = zv - R
        span = 0.14 * 4.0 / self.f_numbers[f_key]
        a, r = rng.uniform(0, 2 * np.pi, n), span * np.sqrt(rng.uniform(0, 1, n))
        tx, ty = r * np.cos(a), r * np.sin(a)
        a, r = rng.uniform(0, 2 * np.pi, n), 1.1 * self.r_clear * np.sqrt(rng.uniform(0, 1, n))
        sx, sy = r * np.cos(a), r * np.sin(a)
        S = np.stack([sx, sy, zc + np.sqrt(R * R - sx**2 - sy**2)], axis=1)
        back = np.stack([-tx, -ty, np.ones(n)], axis=1)
        back /= np.linalg.norm(back, axis=1)[:, None]
        lab = S + np.array([0.0, 0.0, float(ty_["vertex_z_lab_at_lattice_centre"]) - zv])
        ok = self._trace_back(lab, back, self.stop_radius[f_key])
        d2, ok2 = _refract(-back, (S - np.array([0.0, 0.0, zc])) / R, 1.0 / self.n_glass)
        ok &= ok2
        base = S + ((self.substrate - S[:, 2]) / d2[:, 2])[:, None] * d2
        ok &= np.hypot(base[:, 0], base[:, 1]) <= self.r_clear
        rear = S + ((0.0 - S[:, 2]) / d2[:, 2])[:, None] * d2
        d3, ok3 = _refract(d2, np.tile([0.0, 0.0, 1.0], (n, 1)), self.n_glass)
        ok &= ok3
        land = rear + ((-self.gap - rear[:, 2]) / d3[:, 2])[:, None] * d3
        w = 1.0 / (1.0 + tx**2 + ty**2) ** 2
        return land[ok, 0] / self.pixel_mm, land[ok, 1] / self.pixel_mm, w[ok]

    def radius_law_joint(self, f_keys: list[str]) -> dict[str, list[float]]:
        """:meth:`radius_law` at the axis from :meth:`micro_image_joint`."""
        inv_n2 = np.array([1.0 / self.f_numbers[k] ** 2 for k in f_keys])
        A = np.stack([inv_n2, np.ones_like(inv_n2)], axis=1)
        m, q = [], []
        for i in range(len(self.types)):
            y = []
            for k in f_keys:
                u, v, w = self.micro_image_joint(i, k)
                W = w.sum()
                mu, mv = (w * u).sum() / W, (w * v).sum() / W
                y.append(2.0 * ((w * (u - mu) ** 2).sum() + (w * (v - mv) ** 2).sum()) / W)
            a, b = np.linalg.lstsq(A, np.array(y), rcond=None)[0]
            m.append(float(np.sqrt(a)) * self.pixel_mm)
            q.append(float(np.sqrt(max(b, 0.0))) * self.pixel_mm)
        return {"m_mm": m, "q_mm": q}

    def radius_law(self, f_keys: list[str], x_mm: float = 0.0, **kw: object) -> dict[str, list[float]]:
        """Per type, (|m|, |q_i|) in mm from 4σ² = m²/N² + q_i² fitted over ``f_keys`` (the variance
        law with the pixel term exact), and each micro-image's anisotropy
        (σ_x² − σ_y²)/(σ_x² + σ_y²) per f-number."""
        inv_n2 = np.array([1.0 / self.f_numbers[k] ** 2 for k in f_keys])
        A = np.stack([inv_n2, np.ones_like(inv_n2)], axis=1)
        m, q, aniso = [], [], []
        for i in range(len(self.types)):
            y, an = [], []
            for k in f_keys:
                u, v = self.micro_image(i, k, x_mm, **kw)  # type: ignore[arg-type]
                vu, vv = float(np.var(u)), float(np.var(v))
                y.append(2.0 * (vu + vv))
                an.append((vu - vv) / (vu + vv))
            a, b = np.linalg.lstsq(A, np.array(y), rcond=None)[0]
            m.append(float(np.sqrt(a)) * self.pixel_mm)
            q.append(float(np.sqrt(max(b, 0.0))) * self.pixel_mm)
            aniso.append(an)
        return {"m_mm": m, "q_mm": q, "anisotropy": aniso}


def _refract(d: FloatArray, nrm: FloatArray, eta: float) -> tuple[FloatArray, np.ndarray]:
    """Unit directions refracted at unit normals ``nrm`` (against ``d``), n₁/n₂ = ``eta``; and
    which are not totally reflected."""
    cosi = -np.sum(nrm * d, axis=1)
    k = 1.0 - eta**2 * (1.0 - cosi**2)
    t = eta * d + (eta * cosi - np.sqrt(np.maximum(k, 0.0)))[:, None] * nrm
    return t / np.linalg.norm(t, axis=1)[:, None], k >= 0
