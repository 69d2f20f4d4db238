"""Gaussian priors on the intrinsics, for users who know their lens (``--prior F_mm=50±2``).

On real data model mismatch, not noise, decides where F lands along Θ's F–D valley (the
reference's real R12-A observations put F anywhere from 31 to 88 mm depending on modelling
choices; ``docs/model.md``). A user who knows the lens's focal length, or the distance the main
lens was focused at, can say so. Each prior enters Θ as one more squared residual

    ½ · w_p · (q(x) − μ)²,

q a quantity of the camera (an intrinsic, or a function of them such as the focus distance), μ
its known value and σ_p its uncertainty. The weight is w_p = w_uv·σ_uv²/σ_p², the prior stated
in the units of the (u, v) term: with noise weighting (w_uv = 1/σ_uv²) this is the maximum a
posteriori estimate, w_p = 1/σ_p²; with the paper's unweighted Θ (w_uv = 1) the cost is the
(u, v) likelihood scaled by σ_uv², and the prior keeps its place beside it. The sandwich
covariance (:func:`plenocal.calib.solver.covariance`) counts the prior as a measurement of
variance σ_p², so σ stays a σ: a parameter the data do not determine comes out with σ ≈ σ_p,
one the data pin comes out with its data σ whatever the prior.

Quantities: every intrinsic of the layout (``F_mm``, ``d_mm``, ``f1_mm``, ...), the derived
``sensor_distance_mm`` (D + d) and ``lambda``, and ``focus_distance_mm``, the object-to-sensor
distance h of the plane the main lens focuses on the MLA's virtual-depth-2 plane (Perwass 2010
eq. 17 as the paper uses it, eq:focusdist and eq:initdd): H = D + 2ξd (ξ = +1 Galilean, −1
Keplerian, 0 unfocused) and h = H²/(H − F).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.calib.parameters import ParameterLayout, derived_values
from plenocal.errors import UsageError
from plenocal.model.camera import Configuration

FloatArray = NDArray[np.float64]

FOCUS_DISTANCE = "focus_distance_mm"
ALIASES = {"F": "F_mm", "focus": FOCUS_DISTANCE, "focus_mm": FOCUS_DISTANCE, "h": FOCUS_DISTANCE,
           "h_mm": FOCUS_DISTANCE, "focus_distance": FOCUS_DISTANCE}
_PRIOR_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([^±]+?)\s*(?:±|\+/-|\+-)\s*(.+?)\s*$")


@dataclass(frozen=True)
class Prior:
    """A Gaussian prior q ~ N(mean, std²) on a named quantity (see the module docstring)."""

    name: str
    mean: float
    std: float
    origin: str = "option"
    """Where it comes from: ``"option"`` (the user's ``--prior``) or a default's reason."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and math.isfinite(self.std)) or self.std <= 0.0:
            raise UsageError(f"--prior {self.name}: mean and σ must be finite and σ > 0, "
                             f"got {self.mean}±{self.std}")

    @classmethod
    def parse(cls, text: str) -> Prior:
        """``NAME=MEAN±STD`` (also ``+/-`` or ``+-``), e.g. ``F_mm=50±2``, ``focus_distance_mm=1000±50``."""
        m = _PRIOR_RE.match(text)
        if m is None:
            raise UsageError(f"--prior {text!r}: expected NAME=MEAN±STD, e.g. F_mm=50±2 or focus_distance_mm=1000+-50")
        name = ALIASES.get(m.group(1), m.group(1))
        try:
            mean, std = float(m.group(2)), float(m.group(3))
        except ValueError:
            raise UsageError(f"--prior {text!r}: MEAN and STD must be numbers, e.g. F_mm=50±2") from None
        return cls(name, mean, std)

    def __str__(self) -> str:
        return f"{self.name}={self.mean:g}±{self.std:g}"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "mean": self.mean, "std": self.std, "origin": self.origin}


EXIT_PUPIL_RANGE_FOCAL_LENGTHS = 1.0
"""σ of the default prior on the exit pupil's distance e behind H′, in focal lengths: e ~ N(0, F²).
A photographic lens's exit pupil lies within about one focal length of its rear principal plane
(the sets plenocal is checked on: −7.3 and +9.35 mm at F = 50 mm; image-space telecentric designs
excepted). The micro-image centres measure only pitch·(D + d − e)/(D − e), so e rests on the
checkerboard frames' parallax; with frames far from the MLA's conjugate plane they leave e free by
±15 mm and more, and without a bound the solve drifts along that valley towards an image-space
telecentric lens (e → −∞). The prior keeps it finite and changes nothing measurable where the
frames do determine e (σ_e ≈ 0.6 mm on R12-A-like frames: docs/model.md, "The exit pupil")."""


IMAGE_SYSTEMATIC = {"exit_pupil_mm": 10.0}
"""How far the images' estimate of a quantity can be from the lens's, whatever its σ (mm). The exit
pupil e: on plenocal's renders with real micro-lenses (refractive caps on a substrate) e came out
−7.7 mm (the real-optics R12-B's Cooke triplet, truth 9.35), −2.6 mm (double-Gauss, −7.3), +14 mm
(Tessar, 0.8) and +15 mm (a thin lens, 0) off — the caps' field-dependent disparity scale shares
e's signature (docs/model.md, "Real micro-lenses", "Where the data-chosen e fails"). A user's prior
on such a quantity is judged against the data with this added to the data's σ
(:data:`plenocal.calib.calibrate.PRIOR_CONFLICT_SIGMA`): the Tessar render's true pupil, 0.8 ± 1 mm,
against the images' 15.0 ± 3.1 mm, was refused as a conflict (4.4σ); the verdict uses it for the
scale that rests on a data-chosen e (:func:`plenocal.viz.verdict.exit_pupil_scale_findings`)."""


def exit_pupil_prior(focal_length_mm: float) -> Prior:
    """The default prior on ``exit_pupil_mm`` (:data:`EXIT_PUPIL_RANGE_FOCAL_LENGTHS`)."""
    return Prior("exit_pupil_mm", 0.0, EXIT_PUPIL_RANGE_FOCAL_LENGTHS * float(focal_length_mm),
                 origin="default: a photographic lens's exit pupil lies within about one focal length of H′")


def prior_quantities(layout: ParameterLayout) -> tuple[str, ...]:
    """Names a prior may bear on, for this layout."""
    return (*layout.intrinsic_names, "sensor_distance_mm", "lambda", FOCUS_DISTANCE)


MIN_PRIOR_STD_RELATIVE = 1e-9
"""Smallest prior σ, relative to the quantity's magnitude (its initial value, or its typical change
when that is 0): its weight 1/σ² would swamp the normal equations by more than 1e18 and overflow
where the value moves (``--prior F_mm=49.7±1e-200``); a quantity known that well is frozen
(``--freeze``), not given a prior."""
MAX_PRIOR_STD_RELATIVE = 1e6
"""Largest prior σ (relative, as above): wider says nothing, and ``F_mm=1e300±1e300`` overflows."""
MAX_PRIOR_OFFSET_RELATIVE = 1e6
"""Largest distance of a prior's mean from the quantity's initial value (relative, as above): a
mean a million times the quantity's size away is a typo or a unit error."""


def _magnitude(layout: ParameterLayout, name: str, value: float) -> float:
    """The size a prior on ``name`` is judged against: |initial value|, else its typical change."""
    if math.isfinite(value) and value != 0.0:
        return abs(value)
    if name in layout.index:
        return float(layout.scale[layout.index[name]])
    return 1.0


def check_priors(layout: ParameterLayout, priors: Sequence[Prior]) -> None:
    """Refuse unknown names, duplicates, priors on frozen parameters, and a σ or mean outside a
    sane range relative to the quantity (:data:`MIN_PRIOR_STD_RELATIVE`, :data:`MAX_PRIOR_STD_RELATIVE`,
    :data:`MAX_PRIOR_OFFSET_RELATIVE`), one line each, before any work."""
    known = prior_quantities(layout)
    seen: set[str] = set()
    x0 = np.concatenate([layout.pack_intrinsics(layout.template), np.zeros(layout.size - layout.n_intrinsics)])
    for p in priors:
        if p.name not in known:
            raise UsageError(f"--prior {p}: unknown quantity {p.name!r}; known: {', '.join(known)}")
        if p.name in seen:
            raise UsageError(f"--prior {p.name}: given twice; give each quantity one prior")
        seen.add(p.name)
        if p.name in layout.index and not layout.free_mask[layout.index[p.name]]:
            raise UsageError(f"--prior {p}: {p.name} is frozen; a prior on it does nothing (drop one of the two)")
        value = quantity(layout, x0, p.name)[0]
        size = _magnitude(layout, p.name, value)
        if p.std < MIN_PRIOR_STD_RELATIVE * size:
            raise UsageError(f"--prior {p}: σ {p.std:g} is below {MIN_PRIOR_STD_RELATIVE:g} of {p.name}'s size "
                             f"({size:.4g}); to hold it at a value, use --freeze with an initial camera that has it")
        if p.std > MAX_PRIOR_STD_RELATIVE * size:
            raise UsageError(f"--prior {p}: σ {p.std:g} is above {MAX_PRIOR_STD_RELATIVE:g} times {p.name}'s size "
                             f"({size:.4g}): it says nothing; drop it")
        if math.isfinite(value) and abs(p.mean - value) > MAX_PRIOR_OFFSET_RELATIVE * size:
            raise UsageError(f"--prior {p}: the mean is {abs(p.mean - value):.3g} from {p.name}'s initial value "
                             f"{value:.4g}; check its unit ({p.name} is in "
                             f"{'mm' if p.name.endswith('_mm') else 'its own unit'})")


def focus_distance(layout: ParameterLayout, x: FloatArray) -> tuple[float, FloatArray]:
    """h = H²/(H − F), H = D + 2ξd (eq:focusdist, eq:initdd), with its gradient over the full
    vector; NaN where the main lens focuses beyond infinity (H ≤ F)."""
    idx = layout.index
    F, D, d = (float(x[idx[n]]) for n in ("F_mm", "D_mm", "d_mm"))
    xi = {Configuration.GALILEAN: 1.0, Configuration.KEPLERIAN: -1.0}.get(layout.template.configuration, 0.0)
    H = D + 2.0 * xi * d
    g = np.zeros(layout.size)
    if not H > F:
        return float("nan"), g
    dh_dH = H * (H - 2.0 * F) / (H - F) ** 2
    g[idx["D_mm"]] = dh_dH
    g[idx["d_mm"]] = 2.0 * xi * dh_dH
    g[idx["F_mm"]] = H**2 / (H - F) ** 2
    return H**2 / (H - F), g


def quantity(layout: ParameterLayout, x: FloatArray, name: str) -> tuple[float, FloatArray]:
    """Value and gradient (over the full vector) of a prior's quantity at ``x``."""
    if name in layout.index:
        g = np.zeros(layout.size)
        g[layout.index[name]] = 1.0
        return float(x[layout.index[name]]), g
    if name == FOCUS_DISTANCE:
        return focus_distance(layout, x)
    derived = derived_values(layout, x)
    if name in derived:
        return derived[name]
    raise UsageError(f"--prior {name}: unknown quantity; known: {', '.join(prior_quantities(layout))}")


@dataclass(frozen=True)
class PriorTerms:
    """The priors of one solve, with their weights in Θ (module docstring)."""

    priors: tuple[Prior, ...]
    weights: FloatArray

    @classmethod
    def build(cls, priors: Sequence[Prior], *, uv_weight: float, uv_sigma: float) -> PriorTerms:
        """w_p = w_uv·σ_uv²/σ_p² for each prior."""
        w = np.array([uv_weight * uv_sigma**2 / p.std**2 for p in priors], dtype=np.float64)
        return cls(tuple(priors), w)

    def __bool__(self) -> bool:
        return bool(self.priors)

    def evaluate(self, layout: ParameterLayout, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Residuals q(x) − μ, shape (k,), and their gradients, shape (k, layout.size)."""
        vals = np.empty(len(self.priors))
        grads = np.zeros((len(self.priors), layout.size))
        for i, p in enumerate(self.priors):  # a handful of priors at most
            v, g = quantity(layout, x, p.name)
            vals[i], grads[i] = v - p.mean, g
        return vals, grads

    def cost(self, layout: ParameterLayout, x: FloatArray) -> float:
        """½ Σ w_p (q − μ)² (inf where a quantity is undefined)."""
        if not self.priors:
            return 0.0
        e, _ = self.evaluate(layout, x)
        c = 0.5 * float(np.sum(self.weights * e**2))
        return c if math.isfinite(c) else math.inf

    def normal_equations(self, layout: ParameterLayout, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Their contribution to (H, g) over the free intrinsics in solver variables (scaled):
        H = Σ w_p ∇q∇qᵀ, g = Σ w_p (q − μ) ∇q (the data terms' g = JᵀWr with r = obs − pred)."""
        free_int = np.flatnonzero(layout.free_mask[: layout.n_intrinsics])
        e, grads = self.evaluate(layout, x)
        G = grads[:, free_int] * layout.scale[free_int]
        return (G.T * self.weights) @ G, G.T @ (self.weights * e)

    def measurement_covariance(self, layout: ParameterLayout, x: FloatArray) -> FloatArray:
        """M's prior part for the sandwich covariance: Σ w_p² σ_p² ∇q∇qᵀ (solver variables)."""
        free_int = np.flatnonzero(layout.free_mask[: layout.n_intrinsics])
        _, grads = self.evaluate(layout, x)
        G = grads[:, free_int] * layout.scale[free_int]
        s2 = np.array([p.std**2 for p in self.priors])
        return (G.T * (self.weights**2 * s2)) @ G
