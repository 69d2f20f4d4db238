"""The camera's blur profile and depths of field (paper §2.4, fig:blurprofileobj), and the numbers
behind it as a plain dict (``profile.json``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.model.camera import PlenopticCamera
from plenocal.model.profile import (
    DEFAULT_WAVELENGTH_MM,
    DepthOfField,
    blur_radius_px_at,
    depth_of_field,
    micro_lens_aperture_mm,
    mla_distance_from_virtual_depth,
    mla_to_object_mm,
    object_to_mla_mm,
    virtual_depth,
)
from plenocal.viz import new_figure
from plenocal.viz.precalib import TYPE_COLOURS

VIRTUAL_DEPTH_RANGE = (1.0, 15.0)
"""Virtual depths spanned by the profile (paper §7.6: υ from 1 to 15)."""


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _pair(p: tuple[float, float]) -> list[float | None]:
    return [_finite(p[0]), _finite(p[1])]


def profile_samples(
    camera: PlenopticCamera, *, virtual_depth_range: tuple[float, float] = VIRTUAL_DEPTH_RANGE, n: int = 400
) -> dict[str, NDArray[np.float64]]:
    """Blur radius per type along the optical axis, sampled uniformly in virtual depth.

    Virtual depths whose object lies beyond infinity (the virtual point in front of the main lens'
    focal plane, e.g. at h = ∞) are left out.

    Returns
    -------
    dict with ``virtual_depth`` (S,), ``mla_mm`` (S,) (a = −υ·d), ``object_mm`` (S,) and
    ``rho_px`` (I, S) (signed, eq:blurradius with A = Δ_C).
    """
    v = np.linspace(virtual_depth_range[0], virtual_depth_range[1], n)
    a = mla_distance_from_virtual_depth(camera, v)
    real = (camera.D_mm - a) - camera.main_lens.focal_length_mm > 0.0
    v, a = v[real], a[real]
    z = mla_to_object_mm(camera, a)
    rho = np.stack([blur_radius_px_at(camera, a, i) for i in range(camera.n_types)]) if camera.n_types else np.zeros((0, v.size))
    return {"virtual_depth": v, "mla_mm": a, "object_mm": z, "rho_px": rho}


def profile_document(
    camera: PlenopticCamera, *, wavelength_mm: float = DEFAULT_WAVELENGTH_MM, r0_mm: float | None = None, samples: int = 200
) -> dict[str, Any]:
    """Every number of the profile: r0, per-type focus planes and DoF limits in MLA space, virtual
    depth and object space, the total DoF, and the sampled blur profile. ``inf`` becomes null.

    MLA-space limits are (near, far) = closer to / farther from the MLA plane (reference §8.2).
    """
    dof = depth_of_field(camera, r0_mm=r0_mm, wavelength_mm=wavelength_mm)
    s = camera.sensor.pixel_size_mm
    A = micro_lens_aperture_mm(camera)
    types = []
    for t in dof.types:
        types.append({
            "type": t.type_index,
            "focal_length_mm": t.focal_length_mm,
            "focus_plane": {"mla_mm": _finite(t.focus_mla_mm), "virtual_depth": _finite(t.focus_virtual_depth),
                            "object_mm": _finite(t.focus_object_mm)},
            "limits": {"mla_mm": _pair(t.limits_mla_mm), "virtual_depth": _pair(t.limits_virtual_depth),
                       "object_mm": _pair(t.limits_object_mm)},
            "dof": {"mla_mm": _finite(t.dof_mla_mm), "virtual_depth": abs(t.limits_virtual_depth[1] - t.limits_virtual_depth[0]),
                    "object_mm": _finite(t.dof_object_mm)},
        })
    prof = profile_samples(camera, n=samples)
    v_lo, v_hi = dof.limits_virtual_depth
    return {
        "focus_distance_mm": _finite(camera.focus_distance_mm) if camera.focus_distance_mm is not None else None,
        "main_lens_focal_length_mm": camera.main_lens.focal_length_mm,
        "D_mm": camera.D_mm,
        "d_mm": camera.d_mm,
        "micro_lens_aperture_mm": A,
        "working_f_number": camera.d_mm / A,
        "wavelength_mm": wavelength_mm,
        "diffraction_radius_mm": 1.22 * wavelength_mm * camera.d_mm / A,
        "r0_mm": dof.r0_mm,
        "r0_px": dof.r0_mm / s,
        "types": types,
        "total": {
            "object_mm": _pair(dof.limits_object_mm),
            "dof_object_mm": _finite(dof.total_object_mm),
            "virtual_depth": [v_lo, v_hi],
            "dof_mla_mm": dof.total_mla_mm,
        },
        "profile": {
            "virtual_depth": prof["virtual_depth"].tolist(),
            "object_mm": prof["object_mm"].tolist(),
            "rho_px": prof["rho_px"].tolist(),
        },
    }


def _format_length(mm: float) -> str:
    if not math.isfinite(mm):
        return "∞"
    if mm >= 10_000:
        return f"{mm / 1000:.0f} m"
    if mm >= 1000:
        return f"{mm / 1000:.2f} m"
    return f"{mm:.2f} mm"


def blur_profile_figure(camera: PlenopticCamera, dof: DepthOfField | None = None, *, title: str | None = None) -> Any:
    """|ρ| (px) per micro-lens type versus object distance, with virtual depth on a secondary x-axis,
    each type's focus plane (dashed) and depth of field (shaded), r0 (dotted) (paper fig:blurprofileobj).

    At h = ∞ the axis is cropped a little past the farthest DoF limit (as in the paper) and drawn
    in log scale when the distances span more than a decade.
    """
    dof = depth_of_field(camera) if dof is None else dof
    prof = profile_samples(camera, n=800)
    z, rho = prof["object_mm"], np.abs(prof["rho_px"])
    far = max(max(t.limits_object_mm) for t in dof.types)
    z_cap = far * 1.5 if math.isfinite(far) else float(np.max(z))
    keep = z <= max(z_cap, float(np.min(z)) * 2.0)
    z, rho = z[keep], rho[:, keep]
    fig = new_figure(figsize=(8.0, 4.6))
    ax = fig.subplots()
    for i, t in enumerate(dof.types):
        colour = TYPE_COLOURS[i % len(TYPE_COLOURS)]
        ax.plot(z, rho[i], color=colour, lw=1.4, label=f"type {i + 1} (f = {t.focal_length_mm * 1e3:.1f} µm)")
        lo, hi = sorted(t.limits_object_mm)
        ax.axvspan(lo, hi if math.isfinite(hi) else z.max(), color=colour, alpha=0.12)
        if math.isfinite(t.focus_object_mm):
            ax.axvline(t.focus_object_mm, color=colour, ls="--", lw=1.0)
    r0_px = dof.r0_mm / camera.sensor.pixel_size_mm
    ax.axhline(r0_px, color="k", ls=":", lw=1.0, label=f"r0 = {r0_px:.2f} px")
    lo, hi = dof.limits_object_mm
    ax.annotate("", xy=(lo, 0.92), xytext=(hi if math.isfinite(hi) else z.max(), 0.92), xycoords=("data", "axes fraction"),
                arrowprops={"arrowstyle": "<->", "color": "k", "lw": 0.8})
    ax.text(0.5 * (lo + min(hi, z.max())), 0.95, f"total DoF {_format_length(dof.total_object_mm)}",
            transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
    if z.size and z.max() / max(z.min(), 1e-9) > 10:
        ax.set_xscale("log")
    ax.set_xlim(z.min(), z.max())
    ax.set_ylim(0, min(float(np.nanmax(rho)) * 1.05, 12.0) if rho.size else 1.0)
    ax.set_xlabel("object distance [mm]")
    ax.set_ylabel("|ρ| [px]")

    def to_v(x: NDArray) -> NDArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return virtual_depth(camera, object_to_mla_mm(camera, np.asarray(x, dtype=np.float64)))

    def to_z(v: NDArray) -> NDArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return mla_to_object_mm(camera, mla_distance_from_virtual_depth(camera, np.asarray(v, dtype=np.float64)))

    sec = ax.secondary_xaxis("top", functions=(to_v, to_z))
    sec.set_xlabel("virtual depth υ")
    if ax.get_xscale() == "log":
        from matplotlib.ticker import FormatStrFormatter, NullFormatter

        sec.set_xscale("log")
        sec.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        sec.xaxis.set_minor_formatter(NullFormatter())
    h = camera.focus_distance_mm
    focus = "∞" if h is None or not math.isfinite(h) else f"{h:g} mm"
    ax.set_title(title or f"blur profile, h = {focus}, F = {camera.main_lens.focal_length_mm:.2f} mm", fontsize=10)
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 0.88))
    ax.grid(alpha=0.3)
    return fig
