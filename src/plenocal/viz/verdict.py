"""The verdict at the top of the report: can this calibration be trusted, and why (not).

Everything here is a pure function of the stage documents (plain dicts, as read from their JSON
files): numbers rounded to their uncertainty (:func:`round_to_sigma`), each parameter's σ from
the Jacobian and, when calibration wrote it, from frame resampling (:func:`parameter_sigmas`), and
one :class:`Finding` per thing a calibration engineer should know, from every stage. The overall
status is the worst finding's level:

- ``error``  → **not trustworthy** (red): calibration did not converge; a key intrinsic is not
  determined by the data; held-out frames do not fit the camera; calibration rejected a large
  share of the features;
- ``warning`` → **calibrated with warnings** (amber): a stage warned; a parameter is weakly
  determined or its two σ disagree; held-out RMSE well above calibration's; ...
- otherwise → **calibrated** (green). ``info`` findings are listed, never change the status.

The thresholds are named constants below, each with its reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from plenocal.calib.plausibility import MIN_CALIBRATION_FRAMES, RADIUS_SLOPE_TOLERANCE
from plenocal.calib.pupil_systematic import EXIT_PUPIL_SYSTEMATIC_MM, exit_pupil_systematic, whites_pupil_exit_mm

LEVELS = ("info", "warning", "error")

STATUS = {
    "error": ("not trustworthy", "bad"),
    "warning": ("calibrated with warnings", "warn"),
    "info": ("calibrated", "ok"),
}

KEY_INTRINSICS = ("F_mm", "D_mm", "d_mm", "d_centre_mm", "u0_px", "v0_px", "pitch_mm")
"""Shown in the verdict (with every f_i), in this order."""

PHYSICAL_LENGTHS = re.compile(r"^(F|D|d|f\d+|sensor_distance)_mm$")
"""Parameters judged by their relative σ (lengths whose value sets the optics)."""

WEAK_RELATIVE_SIGMA = 0.01
"""σ/|value| above 1 % for a physical length: weakly determined (warning). The paper's R12 values
are determined to 0.1–0.5 %; a 1 % focal length moves the object-space scale by 1 %."""

UNDETERMINED_RELATIVE_SIGMA = 0.10
"""σ/|value| above 10 %: the data do not determine the parameter (error)."""

WEAK_PRINCIPAL_POINT_FRACTION = 0.05
"""σ of u0 (v0) above 5 % of the sensor width (height): weakly determined (warning)."""

SIGMA_DISAGREEMENT = 3.0
"""Jacobian σ and frame-resampling σ differing by more than this factor: the Jacobian misses
model mismatch (or frames disagree); the larger σ is used (warning)."""

VALLEY_CORRELATION = 0.99
"""|r| above this: the two parameters move together along a valley of the cost (plain words, info)."""

REJECTED_FRACTION_WARNING = 0.02
REJECTED_FRACTION_ERROR = 0.10
"""Share of features calibration rejected: beyond 2 % detection or the model has a problem worth
a look; beyond 10 % the rejections are not outliers any more."""

HOLDOUT_RATIO_WARNING = 2.0
"""Held-out (u, v) RMSE above twice calibration's: the camera generalises poorly (warning)."""

HOLDOUT_ERROR_PX = 1.0
"""Held-out (u, v) RMSE above 1 px: the camera does not fit new views (error)."""

FRAME_REJECTED_FRACTION = 0.5
"""A frame losing more than half of its features to rejection: probably mislinked (warning)."""

TYPE_CONFUSION_WARNING = 1e-3
"""Pre-calibration's joint probability of giving a micro-image the wrong type, above which the
type layout is in doubt (warning)."""

MIN_FRAMES = 5
"""Fewer calibration frames than this: poses and intrinsics are poorly separated (warning)."""

NOMINAL_FOCAL_LENGTH_WARNING = 0.05
"""|F/F_nominal − 1| above 5 %, with F itself determined to better than that (its larger σ below
5 % of F): a warning that names what can move F that far. Lens markings are within a few per
cent; a pixel size declared 6.0 µm for 5.5 µm put F +8.0 % (2.8σ) on a simulated R12-A crop with
every other check passing and the RMSEs unchanged (a whole-camera scale the data cannot see),
while the reference's real R12-A observations give +6.4 % for a 50 mm lens (model mismatch, not a
wrong declaration): a warning, not an error."""

EXIT_PUPIL_SCALE_WARNING = 0.01
EXIT_PUPIL_SCALE_ERROR = 0.03
"""F's change for an e off by :data:`EXIT_PUPIL_SYSTEMATIC_MM` (the covariance's regression of F on
e), relative to F: beyond 1 % a warning, beyond 3 % the scale is not trustworthy (error). The
Tessar render: 6.5 % (F −6.9 % off, 3.4σ of its larger σ); the double-Gauss 2.0 % (−0.4 %); the
real-optics R12-B 1.3 % (−0.4 %); PRISM's thin lens: e not kept, nothing."""

RADIUS_SLOPE_WARNING = 0.02
RADIUS_SLOPE_WARNING_SIGMA = 2.0
"""The calibrated camera's white radius-law slope m against the whites' (report.json
``consistency.radius_slope``): beyond 2 % and 2 of its larger σ, a warning (calibration refuses
beyond :data:`plenocal.calib.plausibility.RADIUS_SLOPE_TOLERANCE`, for a wrong declaration). It
follows the exit pupil: with e right it is within 1 % (PRISM +0.27 %, the real-optics R12-B
−0.48 %, the double-Gauss render +0.02 %, the Tessar with --lens −0.05 %, the demo +0.68 %); with
e wrong, the Tessar −4.55 % (2.7σ, e +14.5 mm), the telephoto +4.52 % (5.6σ, e −13.2 mm)."""

STAGES = ("report", "pre-calibration", "detection", "calibration", "evaluation")


# --- numbers ----------------------------------------------------------------------------------
def is_finite_number(x: Any) -> bool:
    """A real, finite number (an int or float, not a bool, not NaN or ±inf): what a figure of a
    document may be shown as (the report uses it too)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def round_to_sigma(value: float, sigma: float | None, *, digits: int = 2) -> tuple[str, str]:
    """``value`` and ``sigma`` as strings: σ to ``digits`` significant digits, the value to the same
    decimal place. Without a usable σ the value gets 6 significant digits and σ is "—".

    >>> round_to_sigma(49.71696693, 0.37413)
    ('49.72', '0.37')
    >>> round_to_sigma(553.9188645, 18.39)
    ('554', '18')
    >>> round_to_sigma(553.9188645, 183.9)
    ('550', '180')
    >>> round_to_sigma(0.05, 0.0996)
    ('0.05', '0.10')
    >>> round_to_sigma(12.5, None)
    ('12.5', '—')
    """
    if not is_finite_number(value):
        return "—", "—" if not is_finite_number(sigma) else f"{sigma:.{digits}g}"
    if not is_finite_number(sigma) or sigma is None or sigma <= 0:
        return f"{value:.6g}", "—"
    exp = math.floor(math.log10(sigma))
    decimals = digits - 1 - exp
    if round(sigma, decimals) >= 10.0 ** (exp + 1):  # 0.0996 → 0.10: one digit fewer
        decimals -= 1
    if decimals > 0:
        return f"{value:.{decimals}f}", f"{sigma:.{decimals}f}"
    q = 10.0 ** (-decimals)
    return f"{round(value / q) * q:.0f}", f"{round(sigma / q) * q:.0f}"


GREEK = {"theta_x": "θx", "theta_y": "θy", "theta_z": "θz", "d_centre": "d at the lattice centre", "D_centre": "D at the lattice centre"}


def display_unit(name: str, value: float) -> tuple[str, str, float]:
    """(label without unit suffix, unit, factor) to show a parameter in a readable unit: lengths
    below 1 mm in µm, angles in µrad.

    >>> display_unit("d_mm", 0.3255)
    ('d', 'µm', 1000.0)
    >>> display_unit("F_mm", 49.7)
    ('F', 'mm', 1.0)
    >>> display_unit("theta_x_rad", 1e-4)
    ('θx', 'µrad', 1000000.0)
    """
    for suffix, unit in (("_mm", "mm"), ("_rad", "rad"), ("_px", "px")):
        if name.endswith(suffix):
            base = GREEK.get(name[: -len(suffix)], name[: -len(suffix)])
            if unit == "mm" and is_finite_number(value) and abs(value) < 1.0:
                return base, "µm", 1e3
            if unit == "rad":
                return base, "µrad", 1e6
            return base, unit, 1.0
    return name, "", 1.0


@dataclass(frozen=True)
class ParameterSigma:
    """One calibrated parameter: value, Jacobian σ (``std``) and frame-resampling σ (``std_frames``)."""

    name: str
    value: float | None
    std: float | None
    std_frames: float | None = None
    frozen: bool = False
    std_lenslets: float | None = None
    """σ of the paraxial value beyond the data's (d, f_i with refractive micro-lenses), or None."""
    std_exit_pupil: float | None = None
    """σ through an exit pupil the images place badly (F, D), or None."""

    @property
    def sigma(self) -> float | None:
        """The larger of the two σ (the honest one when they disagree)."""
        s = [x for x in (self.std, self.std_frames) if is_finite_number(x) and x > 0]  # type: ignore[operator]
        return max(s) if s else None

    @property
    def disagreement(self) -> float | None:
        """max(σ)/min(σ) when both are known, else None."""
        if is_finite_number(self.std) and is_finite_number(self.std_frames) and self.std and self.std_frames:  # type: ignore[arg-type]
            a, b = abs(float(self.std)), abs(float(self.std_frames))  # type: ignore[arg-type]
            return max(a, b) / min(a, b)
        return None

    @property
    def relative(self) -> float | None:
        s = self.sigma
        if s is None or not is_finite_number(self.value) or not self.value:
            return None
        return s / abs(float(self.value))  # type: ignore[arg-type]


def _number(x: Any) -> float | None:
    return float(x) if is_finite_number(x) else None


def parameter_sigmas(calibration: Mapping[str, Any], camera: Mapping[str, Any] | None = None) -> dict[str, ParameterSigma]:
    """Every parameter of a calibration ``report.json`` with its σ; ``std_frames`` from the report
    (``parameters.<name>.std_frames``) or else from ``camera.json``'s ``uncertainty`` (a number is
    the Jacobian σ; an object may carry ``std`` and ``std_frames``; ``uncertainty_frames`` {name: σ}
    is read too). Files written before frame resampling have no ``std_frames``: it is None."""
    unc = (camera or {}).get("uncertainty") if isinstance((camera or {}).get("uncertainty"), dict) else {}
    unc_frames = (camera or {}).get("uncertainty_frames") if isinstance((camera or {}).get("uncertainty_frames"), dict) else {}
    out: dict[str, ParameterSigma] = {}
    params = calibration.get("parameters") if isinstance(calibration.get("parameters"), dict) else {}
    for name, p in params.items():
        if not isinstance(p, dict):
            continue
        frames = _number(p.get("std_frames"))
        if frames is None:
            u = unc.get(name) if isinstance(unc, dict) else None
            frames = _number(u.get("std_frames")) if isinstance(u, dict) else _number((unc_frames or {}).get(name))
        extra = {}
        for key in ("std_lenslets", "std_exit_pupil"):
            v = _number(p.get(key))
            if v is None and isinstance(unc.get(key), dict):
                v = _number(unc[key].get(name))
            extra[key] = v
        out[str(name)] = ParameterSigma(str(name), _number(p.get("value")), _number(p.get("std")), frames, bool(p.get("frozen")),
                                        **extra)
    return out


# --- findings ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """One thing to know: the stage it comes from, its level (info, warning, error) and plain words."""

    stage: str
    level: str
    text: str


@dataclass
class Verdict:
    """What the top of the report says (see the module docstring)."""

    status: str
    css: str
    reasons: list[Finding]
    camera: list[tuple[str, str]] = field(default_factory=list)
    intrinsics: list[list[str]] = field(default_factory=list)
    rmse: list[list[str]] = field(default_factory=list)
    rejections: list[list[str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)


def _px(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}g} px" if is_finite_number(x) else "—"


def _counted(*parts: tuple[Any, str]) -> str:
    """"607 features, 1595 centres" from (count, noun) pairs, leaving out unknown counts."""
    return ", ".join(f"{n} {noun}" for n, noun in parts if isinstance(n, int) and not isinstance(n, bool)) or "—"


def precalibration_findings(doc: Mapping[str, Any], *, sensor_size_px: tuple[int, int] | None = None) -> list[Finding]:
    """Apertures left out and why, the type confusion, the MLA tilt and radius-law gradient, the
    pixel term and unblurred light, and pre-calibration's own warnings."""
    st = "pre-calibration"
    out: list[Finding] = []
    apertures = [a for a in doc.get("apertures") or [] if isinstance(a, dict)]
    used = [a for a in apertures if a.get("used")]
    for a in apertures:
        if not a.get("used"):
            out.append(Finding(st, "info", f"white image at N = {a.get('f_number')} left out: {a.get('reason', '?')}"))
    if apertures and len(used) < 2:
        out.append(Finding(st, "error", f"only {len(used)} white aperture(s) used: Ω needs at least 2"))
    conf = doc.get("type_confusion")
    if is_finite_number(conf):
        level = "warning" if conf > TYPE_CONFUSION_WARNING else "info"
        out.append(Finding(st, level, f"joint type confusion {conf:.2g} (probability that a micro-image is given the "
                                      f"wrong lens type{'; above ' + format(TYPE_CONFUSION_WARNING, 'g') if level == 'warning' else ''})"))
    tilt = (doc.get("initial_camera") or {}).get("mla_tilt_xy_rad")
    if isinstance(tilt, list) and len(tilt) == 2 and all(is_finite_number(x) for x in tilt):
        out.append(Finding(st, "info", f"measured MLA tilt θx, θy = ({tilt[0] * 1e6:.0f}, {tilt[1] * 1e6:.0f}) µrad"))
    field_ = doc.get("radius_law_field")
    m = (doc.get("internal_parameters") or {}).get("m_mm")
    g = (field_ or {}).get("m_gradient_mm_per_px") if isinstance(field_, dict) else None
    if isinstance(g, list) and len(g) == 2 and all(is_finite_number(x) for x in g):
        text = f"radius law varies over the sensor: ∇m = ({g[0]:.2g}, {g[1]:.2g}) mm/px"
        if sensor_size_px is not None and is_finite_number(m) and m:
            change = math.hypot(g[0], g[1]) * math.hypot(*sensor_size_px) / abs(m) * 100.0
            text += f", the slope m changing by {change:.2g} % across the sensor diagonal"
        out.append(Finding(st, "info", text))
    pv, uw = doc.get("pixel_variance_px2"), doc.get("unblurred_weight")
    if is_finite_number(pv) or is_finite_number(uw):
        out.append(Finding(st, "info", "micro-image profile: pixel term σ² = "
                           + (f"{pv:.2g} px²" if is_finite_number(pv) else "—") + ", unblurred light weight "
                           + (f"{uw:.2g}" if is_finite_number(uw) else "—")))
    for w in doc.get("warnings") or []:
        out.append(Finding(st, "warning", str(w)))
    return out


_NOTE_GROUP = re.compile(r"\s*\([^)]*\)\s*$")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def numbers_as_ranges(texts: Sequence[str]) -> str:
    """One text for several that differ only in their numbers (one per frame), each number that
    differs written as its range: "rules out 556 of 560 placements" and "rules out 532 of 536
    placements" → "rules out 532–556 of 536–560 placements". The texts must be the same once each
    number is replaced by one mark (:data:`_NUMBER`)."""
    first = texts[0]
    columns = list(zip(*(_NUMBER.findall(t) for t in texts), strict=True))
    parts = _NUMBER.split(first)
    out = [parts[0]]
    for values, tail in zip(columns, parts[1:], strict=True):
        lo, hi = min(values, key=float), max(values, key=float)
        out.append(lo if float(lo) == float(hi) else f"{lo}–{hi}")
        out.append(tail)
    return "".join(out)


DETECTION_REJECTIONS = {
    "rejected_not_converged": ("micro-image corners", "corner fit did not converge"),
    "rejected_border": ("micro-image corners", "too close to the micro-image border"),
    "rejected_photometric": ("micro-image corners", "low contrast, blurred or badly fitting corner"),
    "clusters_noise": ("corners", "in no cluster (isolated)"),
    "clusters_small": ("clusters", "too small for a virtual depth"),
    "clusters_oversized": ("clusters", "too large to be one target corner"),
    "clusters_unphysical": ("clusters", "unphysical virtual depth"),
    "observations_off_model": ("corners", "off their cluster's virtual-depth model"),
    "clusters_virtual_depth_outliers": ("clusters", "virtual depth far from the frame's (not a target corner)"),
    "rejected_chief_ray_not_converged": ("features", "chief-ray position did not converge"),
}
"""detection.json count key → (what is counted, why it was rejected)."""


def detection_findings(doc: Mapping[str, Any], *, calibration_frames: Sequence[int] | None = None) -> tuple[list[Finding], list[list[str]]]:
    """Frames skipped and why, linking ambiguities, and detection's rejections per reason."""
    st = "detection"
    out: list[Finding] = []
    frames = [f for f in doc.get("frames") or [] if isinstance(f, dict)]
    failed = [f for f in frames if not (f.get("linking") or {}).get("ok", True)]
    by_role: dict[str, list[str]] = {}
    for f in failed:
        by_role.setdefault(str(f.get("role", "?")), []).append(f"{f.get('frame')} ({(f.get('linking') or {}).get('reason', '?')})")
    for role, items in by_role.items():
        n_role = sum(1 for f in frames if str(f.get("role")) == role)
        out.append(Finding(st, "info", f"{len(items)} of {n_role} {role} frames not linked to the board, left out: " + "; ".join(items)))
    n_cal = sum(1 for f in frames if f.get("role") == "calibration")
    n_cal_failed = len(by_role.get("calibration", []))
    if n_cal and n_cal_failed > n_cal / 3:
        out.append(Finding(st, "warning", f"{n_cal_failed} of {n_cal} calibration frames could not be linked"))
    notes: dict[str, list[str]] = {}
    for f in frames:
        note = (f.get("linking") or {}).get("note")
        if note:
            text = _NOTE_GROUP.sub("", str(note))
            notes.setdefault(_NUMBER.sub("#", text), []).append(text)
    for texts in notes.values():
        out.append(Finding(st, "info", f"linking: {numbers_as_ranges(texts)} — {len(texts)} frame{'s' if len(texts) > 1 else ''}"))
    totals: dict[str, int] = {}
    for f in frames:
        for k, v in (f.get("counts") or {}).items():
            if (k in DETECTION_REJECTIONS or k.startswith("rejected_")) and isinstance(v, int) and v:
                totals[k] = totals.get(k, 0) + v
    rows = []
    for k, v in sorted(totals.items(), key=lambda kv: -kv[1]):
        what, why = DETECTION_REJECTIONS.get(k, ("observations", k.replace("_", " ")))
        rows.append([st, what, str(v), why])
    unlinked = sum(int((f.get("linking") or {}).get("unlinked_features") or 0) for f in frames)
    if unlinked:
        rows.append([st, "features", str(unlinked), "their frame could not be linked to the board"])
    if calibration_frames is not None and 0 < len(calibration_frames) < MIN_FRAMES:
        out.append(Finding(st, "warning", f"only {len(calibration_frames)} calibration frames (fewer than {MIN_FRAMES})"))
    return out, rows


def _valleys(correlation: Any) -> list[tuple[str, str, float]]:
    if not isinstance(correlation, dict):
        return []
    names, matrix = correlation.get("names"), correlation.get("matrix")
    if not isinstance(names, list) or not isinstance(matrix, list) or len(matrix) != len(names):
        return []
    out = []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            try:
                r = float(matrix[i][j])
            except (TypeError, ValueError, IndexError):
                continue
            if math.isfinite(r) and abs(r) > VALLEY_CORRELATION:
                out.append((str(names[i]), str(names[j]), r))
    return out


def _fmt_param(p: ParameterSigma) -> str:
    label, unit, factor = display_unit(p.name, p.value if p.value is not None else float("nan"))
    v, s = round_to_sigma(p.value * factor if p.value is not None else float("nan"),
                          p.sigma * factor if p.sigma is not None else None)
    return f"{label} = {v} ± {s} {unit}".rstrip()


def parameter_findings(sigmas: Mapping[str, ParameterSigma], correlation: Any, *,
                       sensor_size_px: tuple[int, int] | None = None) -> list[Finding]:
    """Weakly or not determined parameters, σ disagreements (Jacobian vs frames) and valleys."""
    st = "calibration"
    out: list[Finding] = []
    for p in sigmas.values():
        if p.frozen:
            continue
        if PHYSICAL_LENGTHS.match(p.name):
            if p.sigma is None:
                out.append(Finding(st, "error", f"{p.name}: no σ — the data do not determine it"))
            elif p.relative is not None and p.relative > UNDETERMINED_RELATIVE_SIGMA:
                out.append(Finding(st, "error", f"{_fmt_param(p)}: σ is {p.relative:.0%} of the value — the data do not determine it"))
            elif p.relative is not None and p.relative > WEAK_RELATIVE_SIGMA:
                out.append(Finding(st, "warning", f"{_fmt_param(p)}: weakly determined (σ {p.relative:.1%} of the value)"))
        if p.name in ("u0_px", "v0_px") and sensor_size_px is not None and p.sigma is not None:
            size = sensor_size_px[0 if p.name == "u0_px" else 1]
            if p.sigma > WEAK_PRINCIPAL_POINT_FRACTION * size:
                out.append(Finding(st, "warning", f"{_fmt_param(p)}: weakly determined (σ {p.sigma / size:.0%} of the sensor)"))
        ratio = p.disagreement
        if ratio is not None and ratio > SIGMA_DISAGREEMENT:
            which = "frame resampling" if (p.std_frames or 0) > (p.std or 0) else "the Jacobian"
            out.append(Finding(st, "warning", f"{p.name}: the two σ disagree by {ratio:.1f}× (Jacobian {p.std:.2g}, "
                                              f"frames {p.std_frames:.2g}); the larger, from {which}, is used"))
    valleys = _valleys(correlation)
    for a, b, r in valleys:
        if {a, b} == {"F_mm", "D_mm"}:
            pa, pb = sigmas.get(a), sigmas.get(b)
            each = f"; {_fmt_param(pa)} and {_fmt_param(pb)} are each one's uncertainty along it" if pa and pb else ""
            out.append(Finding(st, "info", f"F and D slide together along a valley of the cost (r = {r:+.4f}): the data "
                                           f"fix their combination better than either{each}"))
    others = [(a, b, r) for a, b, r in valleys if {a, b} != {"F_mm", "D_mm"}]
    if others:
        pairs = ", ".join(f"{display_unit(a, 1.0)[0]}–{display_unit(b, 1.0)[0]} ({r:+.4f})" for a, b, r in others)
        out.append(Finding(st, "info", f"other valleys (|r| > {VALLEY_CORRELATION}): {pairs} — the data fix these "
                                       "combinations better than each parameter; each σ is its own uncertainty along them"))
    return out


def calibration_findings(doc: Mapping[str, Any]) -> tuple[list[Finding], list[list[str]]]:
    """Convergence (final and per stage), frames skipped, rejections and calibration's own warnings."""
    st = "calibration"
    out: list[Finding] = []
    if doc.get("converged") is False:
        out.append(Finding(st, "error", f"did not converge ({doc.get('termination', '?')})"))
    for name, s in (doc.get("stages") or {}).items():
        if isinstance(s, dict) and s.get("converged") is False and not s.get("warm_up"):
            # a warm-up (the robust stage's loose round) stops at its budget by design
            out.append(Finding(st, "warning", f"stage {name} did not converge ({s.get('termination', '?')})"))
    ext = doc.get("extrinsics_init") or {}
    for f in ext.get("frames") or []:
        if isinstance(f, dict) and not f.get("ok", True):
            out.append(Finding(st, "warning", f"frame {f.get('frame')} skipped: {f.get('reason', '?')}"))
    rej = doc.get("rejected") if isinstance(doc.get("rejected"), dict) else {}
    rows = []
    n_kept = doc.get("n_bap")
    if rej:
        p = ((doc.get("options") or {}).get("reject_probability"))
        why = f"χ² rule, p = {p:g}" if is_finite_number(p) else "χ² rule"
        rows.append([st, "features", f"{rej.get('bap', 0)} ({rej.get('uv', 0)} (u, v), {rej.get('rho', 0)} ρ)",
                     f"residual beyond the {why}"])
        rows.append([st, "micro-image centres", str(rej.get("mic", 0)), f"residual beyond the {why}"])
        n_rej = rej.get("bap", 0)
        if isinstance(n_kept, int) and isinstance(n_rej, int) and n_kept + n_rej > 0:
            out += rejection_findings(n_rej, n_kept + n_rej, doc.get("model_field"))
    for w in doc.get("warnings") or []:
        out.append(Finding(st, "warning", str(w)))
    checks = doc.get("checks") if isinstance(doc.get("checks"), dict) else {}
    for failed in checks.get("failed") or []:
        out.append(Finding(st, "error", f"written despite a failed check (--allow-failed-checks): {failed}"))
    n_frames = doc.get("n_frames")
    if isinstance(n_frames, int) and not isinstance(n_frames, bool) and 0 < n_frames < MIN_CALIBRATION_FRAMES \
            and not checks.get("failed"):
        out.append(Finding(st, "error", f"calibrated from {n_frames} frame(s), fewer than {MIN_CALIBRATION_FRAMES}: the σ "
                                        "of the principal point and the scale cannot be checked by frame resampling"))
    for q in doc.get("priors") or []:
        if not isinstance(q, dict):
            continue
        off = _number(q.get("offset_in_prior_sigma"))
        value, sigma = round_to_sigma(float(q.get("value", float("nan"))), _number(q.get("value_std")))
        where = f"{off:+.1f} σ of the prior" if off is not None else "undefined"
        if q.get("conflicts_with_data") and isinstance(q.get("data_only"), dict):
            # A user's prior judged against the data alone (calib.calibrate.PRIOR_CONFLICT_SIGMA): the camera
            # was pulled where the data do not go.
            out.append(Finding(st, "error", _prior_conflict(q)))
            continue
        level = "warning" if q.get("conflicts_with_data") else "info"  # calibration's rule (calib.calibrate)
        out.append(Finding(st, level, f"prior {q.get('name')} = {q.get('mean'):g} ± {q.get('std'):g} used: calibrated "
                                      f"{value} ± {sigma} ({where}"
                                      f"{'; the data disagree with it' if level == 'warning' else ''})"))
    out += declaration_findings(doc)
    out += model_findings(doc.get("model_selection"), lenslets=doc.get("lenslets"))
    out += lenslet_findings(doc.get("lenslets"))
    out += exit_pupil_scale_findings(doc)
    out += field_findings(doc.get("model_field"))
    return out, rows


def rejection_findings(n_rejected: int, n_features: int, field: Any) -> list[Finding]:
    """Calibration's rejections judged where the model holds.

    With calibration's ``model_field`` limited and counting ``features_beyond`` (kept and rejected)
    and ``rejected_beyond``, the share rejected *within* the field is judged against
    :data:`REJECTED_FRACTION_WARNING` and :data:`REJECTED_FRACTION_ERROR`; the rejections beyond it
    are the lens's aberrations, which the field's own finding reports, and are counted in a warning.
    The real-optics R12-B: 531 of 3 919 features rejected (14 %), 490 of them beyond 6.4 mm — 41
    within it (~2 %). Without the counts (older reports), every rejection is judged."""
    st = "calibration"
    field = field if isinstance(field, Mapping) else {}
    beyond, outside, radius = field.get("rejected_beyond"), field.get("features_beyond"), field.get("radius_mm")
    out: list[Finding] = []
    named = isinstance(beyond, int) and not isinstance(beyond, bool) and beyond > 0 and is_finite_number(radius)
    where = (f"beyond the model's field ({radius:.1f} mm from the principal point), where the lens's aberrations "
             "are not in the model") if named else ""
    within = ""
    if named and isinstance(outside, int) and beyond <= min(outside, n_rejected) and outside < n_features:
        out.append(Finding(st, "warning", f"{beyond} of the {n_rejected} features calibration rejected lie {where}"))
        n_rejected, n_features, within, where = n_rejected - beyond, n_features - outside, " within the model's field", ""
    tail = f"; {beyond} of them {where}" if where else ""
    frac = n_rejected / n_features
    if frac > REJECTED_FRACTION_ERROR:
        out.append(Finding(st, "error", f"{n_rejected} of {n_features} features{within} rejected ({frac:.0%}): "
                                        f"too many to be outliers — the model or the detection is wrong{tail}"))
    elif frac > REJECTED_FRACTION_WARNING:
        out.append(Finding(st, "warning", f"{n_rejected} of {n_features} features{within} rejected ({frac:.1%}){tail}"))
    return out


def exit_pupil_scale_findings(doc: Mapping[str, Any]) -> list[Finding]:
    """How far F moves if the exit pupil e that the data chose is :data:`EXIT_PUPIL_SYSTEMATIC_MM`
    off (F's regression on e in the calibration's covariance: ρ_Fe·σ_F/σ_e per mm), when e was
    estimated from the images (kept by the data, no prior of the user's on it); or, when the data
    showed a real lens but could not place its pupil (e left out), how far F moved with e put 10 mm
    behind H′ (calibration's ``scale_probe``, :data:`plenocal.calib.calibrate.EXIT_PUPIL_PROBE_MM`),
    within the range of e the white images allow when they left it out
    (:func:`plenocal.calib.pupil_systematic.exit_pupil_systematic`): :data:`EXIT_PUPIL_SCALE_WARNING`,
    :data:`EXIT_PUPIL_SCALE_ERROR`."""
    sysm = exit_pupil_systematic(doc)
    if sysm is None:
        return []
    shift = sysm.relative["F_mm"]
    sel = doc.get("model_selection") if isinstance(doc.get("model_selection"), Mapping) else {}
    pupil = sel.get("exit_pupil") if isinstance(sel.get("exit_pupil"), Mapping) else {}
    probe = pupil.get("scale_probe") if isinstance(pupil.get("scale_probe"), Mapping) else {}
    if sysm.kind == "whites":
        ws = pupil["white_slope"]
        return _scale_finding(shift, f"the scale rests on the exit pupil lying in the main lens's principal plane (e = 0), "
                                     f"where the white images' radius-law slope puts it (the camera with e = "
                                     f"{whites_pupil_exit_mm(pupil):.1f} mm was {100 * float(ws['with']):+.1f} % "
                                     f"from it, without {100 * float(ws['without']):+.1f} %), within about "
                                     f"±{sysm.whites_range_mm:.1f} mm: with it {probe.get('exit_pupil_mm'):g} mm behind H′ "
                                     f"F comes out {float(probe['F_change_percent']):+.1f} %, so F is known to about "
                                     f"±{100 * shift:.1f} %")
    if sysm.kind == "probe":
        return _scale_finding(shift, f"the scale rests on the exit pupil lying in the main lens's principal plane (e = 0), which "
                                     f"these images cannot place ({pupil.get('reason', 'e left out')}): with it "
                                     f"{probe.get('exit_pupil_mm'):g} mm behind H′, F comes out "
                                     f"{float(probe['F_change_percent']):+.1f} %")
    e = doc["parameters"]["exit_pupil_mm"]
    value, sd = round_to_sigma(float(e["value"]), _number(e.get("std")))
    return _scale_finding(shift, f"the scale rests on the exit pupil the images put at e = {value} ± {sd} mm: F moves "
                                 f"{abs(sysm.slope_mm_per_mm):.2f} mm per mm of e, and e estimated from images through real micro-lenses "
                                 f"can be ~{EXIT_PUPIL_SYSTEMATIC_MM:g} mm off (docs/model.md), so F is known to about "
                                 f"±{100 * shift:.1f} %")


def _scale_finding(shift: float, text: str) -> list[Finding]:
    """The finding of :func:`exit_pupil_scale_findings` for F's relative ``shift``: none up to
    :data:`EXIT_PUPIL_SCALE_WARNING`, an error beyond :data:`EXIT_PUPIL_SCALE_ERROR`; the text
    then names the way out."""
    if not math.isfinite(shift) or shift <= EXIT_PUPIL_SCALE_WARNING:
        return []
    level = "error" if shift > EXIT_PUPIL_SCALE_ERROR else "warning"
    return [Finding("calibration", level, text + (" — not trustworthy" if level == "error" else "")
                    + "; give the lens's exit pupil: its prescription with --lens PRESCRIPTION (see 'plenocal lens'), or "
                      "its distance behind the rear principal plane from a data sheet with --prior exit_pupil_mm=MEAN±STD")]


def field_findings(field: Any) -> list[Finding]:
    """The calibrated model's field (:mod:`plenocal.evaluate.field`): a warning when it ends inside
    the features' reach."""
    if not isinstance(field, dict) or not is_finite_number(field.get("radius_mm")):
        return []
    bound = field.get("max_ratio") if is_finite_number(field.get("max_ratio")) else 0.0
    rings = [r for r in field.get("rings") or [] if isinstance(r, dict) and is_finite_number(r.get("ratio"))
             and is_finite_number(r.get("outer_mm")) and r["outer_mm"] > field["radius_mm"] and r["ratio"] > bound]
    grow = f" grow to {min(r['ratio'] for r in rings):.1f}–{max(r['ratio'] for r in rings):.1f}× the centre's" if rings else " grow"
    reach = f" (the features reach {field['reach_mm']:.1f} mm)" if is_finite_number(field.get("reach_mm")) else ""
    return [Finding("calibration", "warning",
                    f"the model describes the lens to {field['radius_mm']:.1f} mm from the principal point{reach}; "
                    f"beyond, the (u, v) residuals{grow} — the lens's own aberrations, not in the model: no depth is "
                    "given there, and the intrinsics lean on features the model does not fit")]


REAL_LENS_TERM_WORDS = {"exit_pupil": "exit pupil", "depth_distortion": "depth distortion"}
"""The real-lens terms of calibration's ``model_selection``, in words."""


def chosen_model_text(selection: Mapping[str, Any], *, thin: str) -> str:
    """The real-lens terms that ``model_selection`` kept, in words, or ``thin`` when none."""
    kept = [REAL_LENS_TERM_WORDS.get(t, t) for t, ev in selection.items() if isinstance(ev, Mapping) and ev.get("kept")]
    return ", ".join(kept) if kept else thin


def model_findings(selection: Any, *, lenslets: Any = None) -> list[Finding]:
    """What the main-lens model the data chose means for the camera (calibration's
    ``model_selection``, :func:`plenocal.calib.calibrate.real_lens_evidence`): which terms, and,
    when the data show a real lens (a curved field) and no white images said what the
    micro-lenses are (``lenslets``, :func:`lenslet_findings`), that d and f_i are effective
    thin-lenslet values (refractive caps move them by an amount no observation sees:
    ``docs/model.md``, "Real micro-lenses") and, when the centres do not determine e, that F and D
    carry its σ."""
    st = "calibration"
    if not isinstance(selection, Mapping) or not selection:
        return []
    out = [Finding(st, "info", "main-lens model chosen by the data: " + chosen_model_text(selection, thin="the paper's thin lens"))]
    field = selection.get("depth_distortion")
    pupil = selection.get("exit_pupil")
    if isinstance(field, Mapping) and field.get("kept") and not isinstance(lenslets, Mapping):
        out.append(Finding(st, "warning", "a real main lens (curved field): d and f_i are those of thin micro-lenses "
                                          "equivalent to these images; refractive micro-lens caps put the paraxial d "
                                          "and f_i about 1–2 % and 3–6 % away, which no observation can tell "
                                          "(docs/model.md, \"Real micro-lenses\")"))
    if isinstance(field, Mapping) and field.get("kept"):
        wald, threshold = (_number(pupil.get("wald")), _number(pupil.get("threshold"))) if isinstance(pupil, Mapping) else (None, None)
        if wald is not None and threshold is not None and wald <= threshold:
            out.append(Finding(st, "warning", f"the micro-image centres do not determine the exit pupil (W = {wald:.1f}): "
                                              "F and D carry its σ; give --prior exit_pupil_mm=MEAN±STD if the lens's "
                                              "exit pupil is known (its distance behind the rear principal plane)"))
    return out


def lenslet_findings(lenslets: Any) -> list[Finding]:
    """What the white images say of the micro-lenses (calibration's ``lenslets``,
    :func:`plenocal.calib.lenslets.lenslet_record`), as information: refractive ones leave d and
    f_i the effective values that predict the images, with their paraxial values a systematic σ
    away, which the parameter table shows (σ_lenslets): not a fault of the calibration, and every
    real camera has them, so not a warning."""
    if not isinstance(lenslets, Mapping):
        return []
    reason = str(lenslets.get("reason", ""))
    if not lenslets.get("refractive"):
        return [Finding("calibration", "info", reason)]
    rel = lenslets.get("relative_systematic") if isinstance(lenslets.get("relative_systematic"), Mapping) else {}
    d, f = _number(rel.get("d")), _number(rel.get("f"))
    span = f" (σ ±{100 * d:.1f} % and ±{100 * f:.1f} %, σ_lenslets in the table)" if d is not None and f is not None else ""
    return [Finding("calibration", "info", f"{reason}. d and f_i are the effective values that predict these images; "
                                              f"their paraxial (thin-lens-equivalent) values lie further away than the data's "
                                              f"σ{span}, which no observation separates (docs/model.md, \"Real micro-lenses\")")]


def _prior_conflict(q: Mapping[str, Any]) -> str:
    data = q["data_only"]
    s_data = max(x for x in (_number(data.get("std")), _number(data.get("std_frames")), 0.0) if x is not None)
    v, sd = round_to_sigma(float(data.get("value", float("nan"))), s_data or None)
    z = _number(q.get("conflict_sigma"))
    moved = q.get("moved_in_data_sigma") if isinstance(q.get("moved_in_data_sigma"), dict) else {}
    shift = ", ".join(f"{display_unit(str(n), 1.0)[0]} {float(x):+.1f}σ" for n, x in list(moved.items())[:3] if is_finite_number(x))
    return (f"prior {q.get('name')} = {q.get('mean'):g} ± {q.get('std'):g} conflicts with the data: without it they give "
            f"{v} ± {sd}" + (f" ({z:.1f} combined σ away)" if z is not None else "")
            + (f"; it moved {shift} of the data's σ" if shift else "") + " — check the prior")


def declaration_findings(doc: Mapping[str, Any]) -> list[Finding]:
    """The calibrated camera against what the dataset declares (report.json ``consistency``):
    F against the nominal focal length (:data:`NOMINAL_FOCAL_LENGTH_WARNING`) and, as information,
    the radius-law slope against the white images' (calibration refuses beyond
    :data:`plenocal.calib.plausibility.RADIUS_SLOPE_TOLERANCE`)."""
    st = "calibration"
    out: list[Finding] = []
    cons = doc.get("consistency") if isinstance(doc.get("consistency"), dict) else {}
    slope = cons.get("radius_slope") if isinstance(cons.get("radius_slope"), dict) else None
    if slope is not None and is_finite_number(slope.get("relative")):
        rel = float(slope["relative"])
        sig = max((abs(float(v)) for v in (slope.get("std_mm"), slope.get("std_frames_mm")) if is_finite_number(v)), default=0.0)
        m = _number(slope.get("calibrated_mm"))
        z = abs(rel) * abs(m) / sig if m and sig > 0 else math.nan  # without its σ: not judged
        if abs(rel) > RADIUS_SLOPE_WARNING and z > RADIUS_SLOPE_WARNING_SIGMA:
            out.append(Finding(st, "warning", f"the camera's radius-law slope m is {100 * rel:+.1f} % ({z:.1f}σ) from the white "
                                              "images': the images fit as well a camera whose scale (F, D), d or exit pupil is "
                                              "off by about that much — on plenocal's renders a wrong exit pupil does this, a "
                                              "right one stays within 1 % (docs/model.md)"))
        else:
            out.append(Finding(st, "info", f"radius-law slope m of the camera {100 * rel:+.1f} % from the white "
                                           "images' (checks the declared board square and pixel size; refused beyond "
                                           f"{100 * RADIUS_SLOPE_TOLERANCE:.0f} %)"))
    nominal = _number(cons.get("nominal_focal_length_mm"))
    params = doc.get("parameters") if isinstance(doc.get("parameters"), dict) else {}
    F = params.get("F_mm") if isinstance(params.get("F_mm"), dict) else None
    if nominal and F is not None and is_finite_number(F.get("value")) and not F.get("frozen"):
        p = ParameterSigma("F_mm", float(F["value"]), _number(F.get("std")), _number(F.get("std_frames")))
        rel = p.value / nominal - 1.0  # type: ignore[operator]
        determined = p.relative is not None and p.relative < NOMINAL_FOCAL_LENGTH_WARNING
        if abs(rel) > NOMINAL_FOCAL_LENGTH_WARNING and determined:
            out.append(Finding(st, "warning", f"{_fmt_param(p)} is {100 * rel:+.1f} % from the nominal {nominal:g} mm, beyond "
                                              "a lens marking's few per cent: check the declared pixel size "
                                              "(camera_spec.pixel_size_mm scales F with it) and the board's square size"))
    return out


def field_circle(field: Any) -> tuple[float, float, float] | None:
    """(u, v, radius) px of calibration's ``model_field`` (its ``centre_px``, ``radius_px``) when it
    limits the field, else None."""
    if not isinstance(field, Mapping) or not is_finite_number(field.get("radius_px")) or not isinstance(field.get("centre_px"), list | tuple):
        return None
    try:
        cu, cv = (float(x) for x in field["centre_px"])
    except (TypeError, ValueError):
        return None
    return cu, cv, float(field["radius_px"])


def _beyond_field(features: Any, field: Mapping[str, Any] | None) -> dict[int, int]:
    """Rejected features per frame whose (u, v) lies beyond the model's field (:func:`field_circle`)."""
    circle = field_circle(field)
    if circle is None:
        return {}
    cx, cy, radius = circle
    out: dict[int, int] = {}
    for f in features or []:
        if isinstance(f, dict) and is_finite_number(f.get("u")) and is_finite_number(f.get("v")) and f.get("frame") is not None \
                and math.hypot(f["u"] - cx, f["v"] - cy) > radius:
            out[int(f["frame"])] = out.get(int(f["frame"]), 0) + 1
    return out


def _rejected_by_blur_alone(features: Any) -> dict[int, int]:
    """Rejected features per frame whose reason is their ρ alone (``reason`` "rho"): a cluster
    linked to the wrong node is off in (u, v) by the node spacing's image, so these are not that."""
    out: dict[int, int] = {}
    for f in features or []:
        if isinstance(f, dict) and f.get("reason") == "rho" and f.get("frame") is not None:
            out[int(f["frame"])] = out.get(int(f["frame"]), 0) + 1
    return out


def evaluation_findings(doc: Mapping[str, Any], *, calibration_uv_px: float | None,
                        model_field: Mapping[str, Any] | None = None) -> tuple[list[Finding], list[list[str]], list[list[str]]]:
    """RMSE rows (kept observations), rejection rows and findings of an evaluation ``report.json``
    (``model_field``: calibration's, to say which frames' rejections lie beyond it)."""
    st = "evaluation"
    out: list[Finding] = []
    rows: list[list[str]] = []
    rmse_rows: list[list[str]] = []

    def rejected_rows(section: Mapping[str, Any], what: str) -> None:
        r = section.get("rejected") if isinstance(section.get("rejected"), dict) else None
        if r is None:
            return
        c = r.get("counts") or {}
        rule = "held-out rule (χ², σ̂ per frame)" if "held-out" in str(r.get("rule", "")) else "calibration's χ² rule, re-applied"
        rows.append([st, f"features of the {what}", f"{c.get('bap', 0)} ({c.get('uv', 0)} (u, v), {c.get('rho', 0)} ρ)",
                     f"residual beyond the {rule}"])
        if c.get("mic"):
            rows.append([st, "micro-image centres", str(c.get("mic")), f"residual beyond the {rule}"])
        if r.get("suspended"):
            out.append(Finding(st, "error", f"{what}: {r['suspended']}"))
        cal = r.get("calibration_counts")
        if isinstance(cal, dict) and cal.get("bap") is not None and cal.get("bap") != c.get("bap"):
            out.append(Finding(st, "info", f"{what}: the rule at the final optimum rejects {c.get('bap')} features, "
                                           f"calibration (at its robust stage) rejected {cal.get('bap')}"))
        beyond = _beyond_field(r.get("features"), model_field)
        by_blur = _rejected_by_blur_alone(r.get("features"))
        for f, n in (r.get("per_frame") or {}).items():
            pf = (section.get("per_frame") or {}).get(str(f))
            if not isinstance(pf, dict):
                continue
            total = int(pf.get("n_bap") or 0) + int(n)
            if total and n / total > FRAME_REJECTED_FRACTION:
                out_of_field, blur = beyond.get(int(f), 0), by_blur.get(int(f), 0)
                if out_of_field > n / 2:
                    why = f"{out_of_field} of them beyond the model's field, where the lens's aberrations are not in the model"
                elif blur > n / 2:
                    why = (f"{blur} of them by their blur radius ρ alone, their (u, v) fitting: not a wrong link, the blur "
                           "model does not hold for this frame (a board near the plane conjugate to the MLA, where a real "
                           "lens's blur departs most from it)")
                else:
                    why = "probably linked to the wrong nodes"
                out.append(Finding(st, "warning", f"{what}: frame {f} lost {n} of {total} features to rejection — {why}"))

    rm = doc.get("rmse") if isinstance(doc.get("rmse"), dict) else None
    if rm is not None:
        rmse_rows.append(["evaluation: calibration frames, calibrated poses", _px(rm.get("uv_px")), _px(rm.get("rho_px")),
                          _px(rm.get("mic_px")), _counted((doc.get("n_bap"), "features"), (doc.get("n_mic"), "centres"))])
        rejected_rows(doc, "calibration frames")
    held = doc.get("holdout") if isinstance(doc.get("holdout"), dict) else None
    if held is not None:
        hr = held.get("rmse") or {}
        n_fr = len(held.get("frames_evaluated") or [])
        rmse_rows.append([f"evaluation: {n_fr} held-out frames, poses re-estimated", _px(hr.get("uv_px")), _px(hr.get("rho_px")), "—",
                          _counted((held.get("n_bap"), "features"))])
        rejected_rows(held, "held-out frames")
        for f in held.get("frames_failed") or []:
            out.append(Finding(st, "info", f"held-out frame {f.get('frame')} not evaluated: {f.get('reason', '?')}"))
        for c in held.get("calibration_copies") or []:
            out.append(Finding(st, "warning", f"held-out frame {c.get('frame')} is calibration frame "
                                              f"{c.get('calibration_frame')} ({c.get('how')}): the held-out RMSE is no "
                                              "independent check of the camera"))
        huv = hr.get("uv_px")
        if is_finite_number(huv):
            if huv > HOLDOUT_ERROR_PX:
                out.append(Finding(st, "error", f"held-out (u, v) RMSE {huv:.3g} px: the camera does not fit new views"))
            elif is_finite_number(calibration_uv_px) and calibration_uv_px and huv > HOLDOUT_RATIO_WARNING * calibration_uv_px:
                out.append(Finding(st, "warning", f"held-out (u, v) RMSE {huv:.3g} px is {huv / calibration_uv_px:.1f}× "
                                                  f"calibration's {calibration_uv_px:.3g} px: the camera generalises poorly"))
    tr = doc.get("translation") if isinstance(doc.get("translation"), dict) else None
    if tr is not None and (isinstance(tr.get("rmse"), dict) or isinstance(tr.get("epsilon_z_percent"), dict)):
        e = tr.get("epsilon_z_percent") or {}
        trm = tr.get("rmse") or {}
        eps = (f"; ε_z = {e['mean']:.2f} ± {e['std']:.2f} % over {e.get('n_pairs', '?')} pairs"
               if is_finite_number(e.get("mean")) and is_finite_number(e.get("std")) else "")
        rmse_rows.append([f"evaluation: {len(tr.get('frames_evaluated') or [])} translation frames, poses re-estimated",
                          _px(trm.get("uv_px")), _px(trm.get("rho_px")), "—", _counted((tr.get("n_bap"), "features")) + eps])
        rejected_rows(tr, "translation frames")
        for c in tr.get("calibration_copies") or []:
            out.append(Finding(st, "warning", f"translation frame {c.get('frame')} is calibration frame "
                                              f"{c.get('calibration_frame')} ({c.get('how')})"))
        for f in tr.get("frames_without_depth") or []:
            out.append(Finding(st, "info", f"translation frame {f.get('frame')} left out of ε_z: {f.get('reason', '?')}"))
        for r in tr.get("repeated_positions") or []:
            fr = r.get("frames") or ["?", "?"]
            out.append(Finding(st, "warning", f"translation frames {fr[0]} and {fr[1]} are declared at the same position: "
                                              "that pair is left out of ε_z"))
        if tr.get("unit_hint"):
            out.append(Finding(st, "error", f"ε_z: {tr['unit_hint']}"))
    return out, rows, rmse_rows


def worst(findings: Sequence[Finding]) -> str:
    """The highest level among findings (``info`` when there is none)."""
    return max((f.level for f in findings), key=LEVELS.index, default="info")


def camera_rows(camera: Mapping[str, Any], calibration: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """What camera this is: configuration, sensor, micro-lens array, main lens, data."""
    rows: list[tuple[str, str]] = []
    sensor = camera.get("sensor") or {}
    mla = camera.get("mla") or {}
    lattice = mla.get("lattice") or {}
    lens = camera.get("main_lens") or {}
    if camera.get("configuration"):
        rows.append(("configuration", str(camera["configuration"])))
    if sensor:
        px = sensor.get("pixel_size_mm")
        rows.append(("sensor", f"{sensor.get('width_px', '?')} × {sensor.get('height_px', '?')} px"
                     + (f", {px * 1e3:.3g} µm pixels" if is_finite_number(px) else "")))
    if lattice:
        n_types = len(mla.get("focal_lengths_mm") or [])
        rows.append(("micro-lens array", f"{lattice.get('kind', '?')}, {lattice.get('width', '?')} × {lattice.get('height', '?')} lenses, "
                     f"{n_types} type{'s' if n_types != 1 else ''}" if n_types else "pinhole micro-lenses"))
    if lens:
        n = lens.get("f_number")
        fd = camera.get("focus_distance_mm")
        rows.append(("main lens", (f"f/{n:g}" if is_finite_number(n) else "") + (f", focused at {fd:g} mm" if is_finite_number(fd) else "")))
    if calibration is not None:
        ds = calibration.get("dataset")
        n = len(calibration["frames"]) if isinstance(calibration.get("frames"), list) else calibration.get("n_frames")
        data = "; ".join(x for x in (str(ds) if ds else "", f"{n} calibration frames" if isinstance(n, int) else "") if x)
        if data:
            rows.append(("data", data))
    return rows


def intrinsic_rows(sigmas: Mapping[str, ParameterSigma]) -> list[list[str]]:
    """[parameter (unit), value ± σ, how σ was obtained] of the key intrinsics and every f_i."""
    names = [n for n in KEY_INTRINSICS if n in sigmas]
    names += sorted((n for n in sigmas if re.fullmatch(r"f\d+_mm", n)), key=lambda n: int(n[1:-3]))
    rows = []
    for n in names:
        p = sigmas[n]
        label, unit, factor = display_unit(n, p.value if p.value is not None else float("nan"))
        v, sd = round_to_sigma(p.value * factor if p.value is not None else float("nan"),
                               p.sigma * factor if p.sigma is not None else None)
        if p.frozen:
            how = "frozen (not calibrated)"
        elif p.std_frames is None:
            how = "Jacobian"
        else:
            how = "frame resampling (larger)" if (p.std_frames or 0) > (p.std or 0) else "Jacobian (larger)"
            if p.disagreement is not None and p.disagreement > SIGMA_DISAGREEMENT:
                how += f"; the two σ differ {p.disagreement:.1f}×"
        if p.std_lenslets is not None and p.value is not None:
            how += f"; paraxial value ± {round_to_sigma(p.std_lenslets * factor, p.std_lenslets * factor)[1]} (σ_lenslets)"
        if p.std_exit_pupil is not None and p.value is not None and p.std_exit_pupil > (p.sigma or 0.0):
            how += f"; ± {round_to_sigma(p.std_exit_pupil * factor, p.std_exit_pupil * factor)[1]} through the exit pupil (σ_pupil)"
        rows.append([f"{label} [{unit}]" if unit else label, f"{v} ± {sd}" if sd != "—" else v, how])
    return rows


def assemble(documents: Mapping[str, Mapping[str, Any]], *, notes: Sequence[str] = ()) -> Verdict:
    """The verdict from the stage documents by kind (``precalibration``, ``detection``,
    ``calibration``, ``camera``, ``evaluation``...) and the report's notes on missing parts."""
    findings: list[Finding] = [Finding("report", "info", n) for n in notes]
    rejections: list[list[str]] = []
    rmse: list[list[str]] = []
    cal = documents.get("calibration")
    cam = documents.get("camera")
    sensor = (cam or {}).get("sensor") or {}
    size = (int(sensor["width_px"]), int(sensor["height_px"])) if is_finite_number(sensor.get("width_px")) and is_finite_number(sensor.get("height_px")) else None
    if "precalibration" in documents:
        findings += precalibration_findings(documents["precalibration"], sensor_size_px=size)
    if "detection" in documents:
        f, r = detection_findings(documents["detection"], calibration_frames=(cal or {}).get("frames"))
        findings += f
        rejections += r
    sigmas: dict[str, ParameterSigma] = {}
    cal_uv = None
    if cal is None:
        findings.append(Finding("report", "error", "no calibration report: there is nothing to judge"))
    else:
        sigmas = parameter_sigmas(cal, cam)
        f, r = calibration_findings(cal)
        findings += f + parameter_findings(sigmas, cal.get("correlation"), sensor_size_px=size)
        tilt = [sigmas.get(n) for n in ("theta_x_rad", "theta_y_rad")]
        if all(t is not None and t.value is not None and not t.frozen for t in tilt):
            findings.append(Finding("calibration", "info", "calibrated MLA tilt " + ", ".join(_fmt_param(t) for t in tilt if t)))
        rejections += r
        crm = cal.get("rmse") or {}
        cal_uv = crm.get("uv_px") if is_finite_number(crm.get("uv_px")) else None
        rmse.append(["calibration solve", _px(crm.get("uv_px")), _px(crm.get("rho_px")), _px(crm.get("mic_px")),
                     _counted((cal.get("n_bap"), "features"), (cal.get("n_mic"), "centres"), (cal.get("n_frames"), "frames"))])
    if "evaluation" in documents:
        f, r, rm = evaluation_findings(documents["evaluation"], calibration_uv_px=cal_uv,
                                       model_field=(cal or {}).get("model_field"))
        findings += f
        rejections += r
        rmse += rm
        if "holdout" not in documents["evaluation"]:
            findings.append(Finding("evaluation", "info", "no held-out frames: every RMSE is on the calibration's own frames"))
    findings.sort(key=lambda x: (STAGES.index(x.stage) if x.stage in STAGES else len(STAGES), -LEVELS.index(x.level)))
    level = worst(findings)
    status, css = STATUS[level]
    reasons = [f for f in findings if f.level == level and level != "info"]
    return Verdict(status, css, reasons, camera_rows(cam or {}, cal) if cam else [], intrinsic_rows(sigmas), rmse,
                   rejections, findings, headline(cal, documents.get("evaluation"), sigmas))


def not_trustworthy_line(verdict: Verdict) -> str | None:
    """One line for the console when the verdict is "not trustworthy" (its first reason, and how
    many more), else None."""
    if verdict.status != STATUS["error"][0]:
        return None
    first = verdict.reasons[0] if verdict.reasons else Finding("report", "error", "see the report")
    more = f" (and {len(verdict.reasons) - 1} more reason{'s' if len(verdict.reasons) > 2 else ''})" if len(verdict.reasons) > 1 else ""
    return f"not trustworthy — {first.stage}: {first.text}{more}"


def headline(calibration: Mapping[str, Any] | None, evaluation: Mapping[str, Any] | None,
             sigmas: Mapping[str, ParameterSigma]) -> list[str]:
    """The few numbers of the status line: F ± σ, calibration's and the held-out (u, v) RMSE, ε_z."""
    out = []
    if "F_mm" in sigmas:
        F = sigmas["F_mm"]
        sys_text = ""
        if F.std_exit_pupil is not None and F.std_exit_pupil > (F.sigma or 0.0):
            sys_text = f" (± {round_to_sigma(F.std_exit_pupil, F.std_exit_pupil)[1]} mm through the exit pupil)"
        out.append(_fmt_param(F) + sys_text)
    if calibration is not None:
        rm = calibration.get("rmse") or {}
        n, rej = calibration.get("n_bap"), (calibration.get("rejected") or {}).get("bap")
        if is_finite_number(rm.get("uv_px")):
            out.append(f"(u, v) RMSE {rm['uv_px']:.3g} px over {n} calibration features"
                       + (f" ({rej} rejected)" if isinstance(rej, int) else ""))
    held = (evaluation or {}).get("holdout")
    if isinstance(held, dict) and is_finite_number((held.get("rmse") or {}).get("uv_px")):
        out.append(f"held-out {held['rmse']['uv_px']:.3g} px over {len(held.get('frames_evaluated') or [])} frames")
    tr = (evaluation or {}).get("translation")
    if isinstance(tr, dict) and is_finite_number((tr.get("epsilon_z_percent") or {}).get("mean")):
        out.append(f"ε_z {tr['epsilon_z_percent']['mean']:.2f} %")
    return out


__all__ = [
    "Finding",
    "ParameterSigma",
    "Verdict",
    "assemble",
    "calibration_findings",
    "camera_rows",
    "declaration_findings",
    "detection_findings",
    "display_unit",
    "evaluation_findings",
    "intrinsic_rows",
    "parameter_findings",
    "parameter_sigmas",
    "precalibration_findings",
    "round_to_sigma",
    "worst",
]
