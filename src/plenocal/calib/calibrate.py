"""The calibration: initial extrinsics, staged then joint optimisation of Θ, uncertainty.

Paper §5 (eq:completemodel, the cost Θ of §5.2), reference §7, DESIGN.md §5. Stages:

1. ``extrinsics``: a pose per frame from cluster barycentres and PnP
   (:mod:`plenocal.calib.extrinsics`); frames that fail are reported and skipped.
2. ``mla``: the MLA's in-plane pose and pitch fitted to the micro-image centres alone (MIC term,
   intrinsics otherwise fixed), so that the initial MLA agrees with the observed centres whatever
   the initial principal point.
3. ``poses``: every pose from triangulated virtual points (:func:`plenoptic_poses`); optionally
   refined on (u, v) with the intrinsics fixed (``pose_iterations``, off by default).
4. ``robust``: all free parameters on Θ with a Huber loss on per-term normalised residuals, the
   noise levels σ_t re-estimated robustly (MAD) before each of ``huber_rounds`` rounds (the
   first converged loosely, the last tightly); then whole (frame, node) clusters and whole
   frames whose typical (u, v) residual is gross are rejected as units
   (:func:`plenocal.calib.robust.reject_groups`; reported in ``rejected_groups``) and the last
   round solved again without them; then observations beyond the χ² threshold are rejected
   (``loss="huber"``, the default). With ``loss="linear"`` this stage is skipped and nothing is
   rejected.
5. ``final``: plain (weighted) least squares on the kept observations to convergence; σ_t from the
   residuals (re-solved while they change by more than 2 %); covariance of the estimate (sandwich form, see :func:`plenocal.calib.solver.covariance`).

Every stage starts from the previous stage's damping, and the solver tries the undamped
Gauss–Newton step first (:func:`plenocal.calib.solver.levenberg_marquardt`): Θ's valleys
(F–D, u0–t_x, d–f_i) are long and narrow, and damped steps only creep along them.

Weighting: the terms (u, v), ρ and MIC have different noise levels, so by default each is
weighted by 1/σ̂_t² (``weighting="noise"``) — the maximum-likelihood form of Θ that makes the
reported σ honest. ``weighting="none"`` minimises the paper's unweighted Θ (σ are then given by
the sandwich formula with the per-term residual variances).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from plenocal._distributions import chi2_isf
from plenocal.calib.extrinsics import ExtrinsicsInit, initial_extrinsics, plenoptic_poses
from plenocal.calib.parameters import OPTIONAL_GROUPS, ParameterLayout, derived_values
from plenocal.calib.priors import IMAGE_SYSTEMATIC, Prior, PriorTerms, check_priors, exit_pupil_prior, quantity
from plenocal.calib.resampling import DISAGREEMENT_FACTOR, FrameResampling, frame_jackknife
from plenocal.calib.residuals import MeasuredPupilRadii, Residuals
from plenocal.calib.robust import GroupRejection, chi2_thresholds, reject_groups, robust_sigma
from plenocal.calib.solver import MAX_ITERATIONS, SolverReport, covariance, levenberg_marquardt
from plenocal.errors import DataError
from plenocal.model.camera import MicroLensArray, PlenopticCamera, RhoForm
from plenocal.model.geometry import Pose
from plenocal.model.lattice import TypeLayout
from plenocal.model.observations import POSITIONS_TEMPLATE_FIT, BapFeatures, MicroImageCentres, Observations
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]

ABLATION_CONFIGURATIONS: dict[int, tuple[str, ...]] = {
    1: (),
    2: ("distortion",),
    3: ("pitch",),
    4: ("pitch", "distortion"),
    5: ("tilt",),
    6: ("tilt", "distortion"),
    7: ("tilt", "pitch"),
    8: ("tilt", "pitch", "distortion"),
}
"""Paper Table ablation: configuration number → frozen groups (tilt θx, θy; pitch; distortion).

A frozen group keeps its initial value: from Ω (paper §3.3) no tilt, no distortion and the pitch
λ·Δc. Measured on synthetic R12-A data (the fixture camera: tilt ~1e-3 rad, pitch 0.04 % below the
initial λ·Δc; ``benchmarks/bench_calibrate.py --ablation``, ``plenocal calibrate --ablation-table``):
every configuration converges. Without the tilt (5–8) the micro-image centres cannot be fitted
(MIC RMSE 0.14 → 0.20 px, ~55 centres rejected); with the pitch frozen (3, 4, 7, 8) the scale
error goes into d (biased by 2–7 %) and the (u, v) RMSE grows (0.42 → 0.46–0.50 px). The paper reports no
convergence for 7 and 8; here the problem stays well posed — the MLA translation and θz are
still free, D/(D + d) absorbs the frozen pitch's scale in the MIC term — so the optimum is a
biased compromise, reached by the staged, Gauss–Newton-first solver; the paper's failure is most
likely its optimiser's (one joint LM from the initial guess) rather than an under-determined
model, which we cannot check without the real R12-A data.
"""


DEFAULT_RHO_FORM = "virtual-depth"
"""The blur-radius form calibrations use unless told otherwise. Measured on the PRISM renders of
an R12 with the paper's full MLA tilt (prism-r12b, 12 024 detected features against the truth): the
detector's ρ (eq:radiusfinal: the cluster's virtual depth through Ω's one q'_i per type) is
biased by +0.005 px (RMS 0.012) against the virtual-depth form, +0.045 px (RMS 0.049, with a
spatial trend) against the legacy form and −0.23 px against libpleno HEAD's (docs/model.md)."""


DEFAULT_WEIGHTING = "none"
"""The paper's unweighted Θ, measured better on data plenocal did not make. On the PRISM renders
(prism-r12b, plenocal's detections, default model) per-term 1/σ̂² weights let the terms with the
smallest noise — ρ (0.015 px) and the micro-image centres (0.06 px) — carry their small systematic
errors into the solution: the principal point 82 / −80 px off (4.7σ), d −0.45 %, f_i −0.6 %;
unweighted: (9, −19) px, d +0.15 %, f_i +0.02 %, F −0.04 % (docs/model.md)."""


ROBUST_WARMUP_ITERATIONS = 100
"""Iterations allowed to the robust stage's first (loose, ftol 1e-6) Huber round. It starts at the
initial camera, where σ_t by MAD is several times the noise, and on a real lens with e and Z1, Z2
free it can creep along the e–F–D valley: on the visible real-optics R12-B it took 372 and 475 of
the solver's 500 (its cost falling 1.3 % over the last 375), so that a machine's last bits could
decide "not converged" and with it which real-lens terms the data keep; on traced double-Gauss
features it reached 500 and the real-lens terms were dropped as "did not converge" although the
next round converged in 13 iterations. Its end only sets the next round's σ_t (the next round
re-solves to 1e-10): PRISM's took 3 iterations, plenocal's tilted renders 10–32."""


def convergence_counts(name: str, stage: Mapping[str, Any]) -> bool:
    """Whether a stage's convergence is part of the calibration's: every stage's but the warm-ups
    capped by design (the optional pose stage, ``pose_iterations``; the robust stage's loose rounds,
    ``warm_up``, :data:`ROBUST_WARMUP_ITERATIONS`)."""
    return name != "poses" and not stage.get("warm_up")


@dataclass(frozen=True)
class CalibrationOptions:
    """Options of :func:`calibrate` (all keyword, all with defaults).

    Attributes
    ----------
    freeze : tuple of str
        Parameter groups or names held at their initial value (e.g. ``("tilt", "pitch")``).
    two_pitches : bool
        Optimise two MLA pitches (p0, p1) (libpleno HEAD, the default) instead of one (the paper).
        A real R12's micro-image lattice is anisotropic (23.3126 / 23.3146 px in the reference's
        files); one pitch reproduces it by tilting the MLA and moving the principal point, which on
        PRISM renders of such a camera put F, D, d and f_i 9 % off at 11σ.
    rho_form : str or None
        The blur-radius form (:class:`plenocal.model.camera.RhoForm` value): ``"legacy"``,
        ``"head"`` or ``"virtual-depth"``; None keeps the initial camera's.
    pinhole_micro_lenses : bool
        I = 0: micro-lenses as pinholes, no ρ residuals (the paper's NOUR baseline).
    loss : {"huber", "linear"}
        Robust loss + outlier rejection (default) or plain least squares.
    huber_threshold : float
        Huber threshold c, in units of each term's σ.
    reject_probability : float
        A unit (a feature's (u, v), its ρ, a MIC) is rejected when its squared normalised residual
        exceeds the χ² quantile 1 − ``reject_probability``.
    weighting : {"none", "noise"}
        The paper's unweighted Θ (default, :data:`DEFAULT_WEIGHTING`) or per-term 1/σ̂_t² weights
        (maximum likelihood if the residuals were pure noise). σ are honest either way (sandwich).
    use_mic : bool
        Include the MIC term of Θ.
    ftol : float
        Convergence: predicted relative decrease of one more Gauss–Newton step.
    huber_rounds : int
        Rounds of the robust stage (σ_t re-estimated by MAD before each): the first converges
        loosely from the initial camera, the last to ``1e-10``.
    warmup_iterations : int
        Iteration budget of the robust stage's loose rounds (all but the last,
        :data:`ROBUST_WARMUP_ITERATIONS`): a warm-up whose end only sets the next round's σ_t.
        Reaching it is not a failure; the last round and the final solve must converge.
    pose_iterations : int
        Iterations of a pose-only stage on (u, v) before the joint stages (0, the default, skips
        it: with the intrinsics still off the poses only creep, and the joint stage's
        Gauss–Newton steps do better from the triangulated poses).
    pupil_vignetting : bool
        BAP (u, v) predicted with the main aperture's vignetting of the micro-lens pupil
        (:func:`plenocal.model.projection.pupil_shift`; beyond the paper): for observations that
        report corners where they appear. Off by default (chief-ray positions, as plenocal's
        detector reports them); ``plenocal calibrate`` chooses it from the observations' recorded
        positions. Ignored with pinhole micro-lenses.
    clustered_covariance : bool
        σ of the parameters with the errors of one target corner's observations in one frame
        correlated (:func:`plenocal.calib.solver.covariance`); False treats every row as
        independent (too small σ for detected features, whose ρ share the cluster's υ).
    frame_resampling : bool
        Also estimate each parameter's σ by the leave-one-frame-out jackknife
        (:func:`plenocal.calib.resampling.frame_jackknife`), which sees model mismatch that the
        Jacobian σ cannot.
    priors : tuple of Prior
        Gaussian priors on intrinsics or the focus distance (:mod:`plenocal.calib.priors`; none
        by default), in every joint stage, the covariance and the jackknife.
    depth_distortion : bool or None
        Estimate the depth distortion Z1, Z2 of the virtual space (a real main lens's curved field,
        :class:`plenocal.model.camera.Distortion`; beyond the paper; ``docs/model.md``, "Field
        curvature"). None (the default): estimated, and kept when the data support it
        (:func:`real_lens_evidence`); otherwise the camera is calibrated again without it.
    exit_pupil : bool or None
        Estimate the main lens's exit-pupil distance e behind H′ (``exit_pupil_mm``): the
        micro-image centres are projected from the exit pupil, not from the lens plane
        (:class:`plenocal.model.camera.MainLens`; beyond the paper; ``docs/model.md``, "The exit
        pupil"). False: e stays at the initial camera's value (0, the paper's lens-plane aperture).
        None (the default): estimated, and kept when the data support it, as ``depth_distortion``.
    """

    freeze: tuple[str, ...] = ()
    two_pitches: bool = True
    rho_form: str | None = DEFAULT_RHO_FORM
    pinhole_micro_lenses: bool = False
    loss: str = "huber"
    huber_threshold: float = 2.5
    reject_probability: float = 1e-4
    weighting: str = DEFAULT_WEIGHTING
    use_mic: bool = True
    ftol: float = 1e-13
    huber_rounds: int = 2
    warmup_iterations: int = ROBUST_WARMUP_ITERATIONS
    pose_iterations: int = 0
    pupil_vignetting: bool = False
    clustered_covariance: bool = True
    frame_resampling: bool = True
    priors: tuple[Prior, ...] = ()
    exit_pupil: bool | None = None
    depth_distortion: bool | None = None
    white_radius_slope_mm: float | None = None
    """The white images' radius-law slope m (Ω's), when known: the exit pupil the data choose is
    checked against it (:data:`WHITE_SLOPE_PUPIL_MARGIN`)."""

    def __post_init__(self) -> None:
        if self.loss not in ("huber", "linear"):
            raise ValueError(f"loss must be 'huber' or 'linear', got {self.loss!r}")
        if self.weighting not in ("noise", "none"):
            raise ValueError(f"weighting must be 'noise' or 'none', got {self.weighting!r}")
        if self.rho_form is not None and self.rho_form not in {r.value for r in RhoForm}:
            raise ValueError(f"rho_form must be one of {[r.value for r in RhoForm]}, got {self.rho_form!r}")


@dataclass
class ParameterEstimate:
    name: str
    value: float
    std: float
    frozen: bool = False
    std_frames: float | None = None
    """σ from the leave-one-frame-out jackknife (None when not computed)."""

    @property
    def std_max(self) -> float:
        """The larger of the Jacobian and the frame-resampling σ."""
        return max(self.std, self.std_frames) if self.std_frames is not None and np.isfinite(self.std_frames) else self.std


UNDETERMINED_RELATIVE_SIGMA = 0.01
"""A length whose larger σ exceeds this fraction of its value is "not determined by the data"."""
VALLEY_CORRELATION = 0.99
"""Two parameters correlated beyond this move together along a valley of Θ."""
PRIOR_CONFLICT_SIGMA = 3.0
"""A user's prior conflicts with the data when what the data alone say of its quantity (the
calibration re-solved without the user's priors, :func:`data_only_solution`) lies further than this
many combined σ from the prior's mean: z = |q_data − μ| / √(σ_data² + σ_p²), σ_data the larger of
the data-only solution's Jacobian and frame-resampling σ (with, for the exit pupil, the images'
known systematic :data:`plenocal.calib.priors.IMAGE_SYSTEMATIC` added in quadrature). The posterior's own offset from μ cannot
tell: a prior tight enough to win sits on its mean whatever the data say (``F_mm=45±1e-6`` on data
that put F at 49.7 ± 0.4 mm was written "no conflict" while it moved d and f_i by 14σ). For a
Gaussian prior that agrees with the data z is |N(0, 1)|: 3 is exceeded 0.27 % of the time. Priors
the calibration adds by default (weak, :func:`plenocal.calib.priors.exit_pupil_prior`) keep the
simpler rule: the calibrated value beyond this many of the prior's σ."""


@dataclass
class CalibrationResult:
    """Everything :func:`calibrate` produces."""

    camera: PlenopticCamera
    poses: dict[int, Pose]
    layout: ParameterLayout
    x: FloatArray
    covariance: FloatArray
    sigma: dict[str, float]
    rmse: dict[str, float]
    sum_squared_residuals: float
    n_bap: int
    n_mic: int
    rejected: dict[str, int]
    downweighted: dict[str, int]
    rejected_features: BapFeatures
    kept_bap: BapFeatures
    kept_mic: MicroImageCentres
    solver: SolverReport
    stages: dict[str, dict[str, object]] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    extrinsics: ExtrinsicsInit | None = None
    options: CalibrationOptions = field(default_factory=CalibrationOptions)
    intra_cluster_correlation: dict[str, float] = field(default_factory=dict)
    """Per BAP term, the correlation of the errors of one target corner's observations in one
    frame, used in the covariance (:func:`plenocal.calib.solver.covariance`)."""
    frame_resampling: FrameResampling | None = None
    """Leave-one-frame-out jackknife (σ that sees model mismatch), when computed."""
    pupil: dict[str, object] = field(default_factory=dict)
    """The (u, v) model: ``vignetting`` (bool) and, with it, where the shift's radii come from
    (``radii``: ``"white images (Ω)"`` or ``"camera radius law"``)."""
    rejected_groups: dict[str, object] = field(default_factory=dict)
    """Whole clusters and frames rejected in the robust stage, each with how far off and why
    (:meth:`plenocal.calib.robust.GroupRejection.to_dict`)."""
    data_only: DataOnly | None = None
    """The calibration re-solved without the user's priors (:func:`data_only_solution`), when
    there are any: what the data alone say, against which each prior is judged."""
    model_selection: dict[str, dict[str, object]] = field(default_factory=dict)
    """Per real-lens term left to the data (``exit_pupil``, ``depth_distortion``): its Wald
    statistic against the thin lens, the threshold and whether it was kept
    (:func:`real_lens_evidence`)."""

    @property
    def converged(self) -> bool:
        """Every stage converged: the final solve and each earlier one in ``stages`` (but the
        warm-ups capped by design: the optional pose stage, ``pose_iterations``, and the robust
        stage's loose rounds, ``warmup_iterations``)."""
        return bool(self.solver.converged
                    and all(s.get("converged", True) for k, s in self.stages.items() if convergence_counts(k, s)))

    @property
    def std(self) -> FloatArray:
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))

    def parameters(self) -> list[ParameterEstimate]:
        """Intrinsics and derived quantities, each with value and standard deviation."""
        lay = self.layout
        free = lay.free_mask
        sd = self.std
        fr = self.frame_resampling
        out = [
            ParameterEstimate(n, float(self.x[i]), float(sd[i]), not bool(free[i]),
                              None if fr is None else float(fr.std[i]))
            for i, n in enumerate(lay.intrinsic_names)
        ]
        for name, (val, grad) in derived_values(lay, self.x).items():
            out.append(ParameterEstimate(name, float(val), float(np.sqrt(max(float(grad @ self.covariance @ grad), 0.0))),
                                         std_frames=None if fr is None else fr.derived_std.get(name)))
        return out

    def uncertainty_warnings(self) -> list[str]:
        """Plain-words flags: parameters whose two σ disagree by more than
        :data:`~plenocal.calib.resampling.DISAGREEMENT_FACTOR`, and lengths (F, D, d, f_i, D + d)
        that the data do not determine (larger σ above :data:`UNDETERMINED_RELATIVE_SIGMA`),
        with the valley they move along."""
        params = {p.name: p for p in self.parameters()}
        names, corr = self.correlation()
        pos = {n: i for i, n in enumerate(names)}
        out = []
        for p in params.values():
            if p.frozen or p.std_frames is None or not np.isfinite(p.std_frames) or p.std <= 0 or p.std_frames <= 0:
                continue
            ratio = p.std_frames / p.std
            if ratio > DISAGREEMENT_FACTOR or ratio < 1.0 / DISAGREEMENT_FACTOR:
                out.append(f"{p.name}: σ from frame resampling {p.std_frames:.3g} is {ratio:.1f}× the Jacobian σ "
                           f"{p.std:.3g}" + (" — model mismatch moves it more than noise does; trust the larger"
                                             if ratio > 1 else " — the frames agree better than the noise suggests"))
        lengths = [n for n in params if n in ("F_mm", "D_mm", "d_mm", "sensor_distance_mm") or
                   (n[0] == "f" and n.endswith("_mm") and n[1:-3].isdigit())]
        for n in lengths:
            p = params[n]
            if p.frozen or not np.isfinite(p.std_max) or abs(p.value) == 0:
                continue
            rel = p.std_max / abs(p.value)
            if rel <= UNDETERMINED_RELATIVE_SIGMA:
                continue
            partners = []
            if n in pos:
                row = corr[pos[n]]
                partners = [f"{names[j]} ({row[j]:+.3f})" for j in np.argsort(-np.abs(row))
                            if j != pos[n] and abs(row[j]) >= VALLEY_CORRELATION][:3]
            along = f"; it moves together with {', '.join(partners)}" if partners else ""
            out.append(f"{n} is not determined by these data: ±{p.std_max:.3g} ({100 * rel:.1f} %){along}")
        for q in self.prior_summary():
            if q["conflicts_with_data"]:
                out.append(prior_conflict_text(q))
        return out

    def prior_summary(self) -> list[dict[str, object]]:
        """Each prior used: its mean and σ, the calibrated value with its σ (Jacobian, and frame
        resampling for the intrinsics), how far the value sits from the prior in the prior's σ, and
        whether that is beyond :data:`PRIOR_CONFLICT_SIGMA` (the report's verdict reads this flag)."""
        out: list[dict[str, object]] = []
        names = self.layout.intrinsic_names
        fr = self.frame_resampling
        for p in self.options.priors:
            val, grad = quantity(self.layout, self.x, p.name)
            std = float(np.sqrt(max(float(grad @ self.covariance @ grad), 0.0)))
            std_frames = None
            if fr is not None and p.name in names:
                std_frames = float(fr.std[names.index(p.name)])
            elif fr is not None:
                std_frames = fr.derived_std.get(p.name)
            entry = p.to_dict() | {"value": float(val), "value_std": std, "value_std_frames": std_frames,
                                   "offset_in_prior_sigma": float((val - p.mean) / p.std)}
            judged = self.data_only.judge(self.layout, self.x, p) if self.data_only is not None and \
                p.origin == "option" else None
            if judged is not None:
                entry |= judged
            else:
                entry["conflicts_with_data"] = bool(abs(val - p.mean) > PRIOR_CONFLICT_SIGMA * p.std)
            out.append(entry)
        return out

    def correlation(self) -> tuple[tuple[str, ...], FloatArray]:
        """Correlation matrix of the free intrinsics: (names, matrix of shape (n, n))."""
        lay = self.layout
        idx = np.flatnonzero(lay.free_mask[: lay.n_intrinsics])
        c = self.covariance[np.ix_(idx, idx)]
        s = np.sqrt(np.clip(np.diag(c), 1e-300, None))
        return tuple(lay.intrinsic_names[i] for i in idx), c / np.outer(s, s)

    def parameter_table(self) -> str:
        """A readable table of intrinsics: value, σ, and the strongest correlation of each."""
        names, corr = self.correlation()
        pos = {n: i for i, n in enumerate(names)}
        lines = [f"{'parameter':<20s} {'value':>18s} {'std':>12s} {'std_frames':>12s}  strongest correlation"]
        for p in self.parameters():
            strongest = ""
            if p.name in pos:
                row = np.abs(corr[pos[p.name]]).copy()
                row[pos[p.name]] = -1
                if row.size > 1:
                    j = int(np.argmax(row))
                    strongest = f"{names[j]} {corr[pos[p.name], j]:+.4f}"
            std = "frozen" if p.frozen else f"{p.std:.4g}"
            sf = "" if p.frozen or p.std_frames is None else f"{p.std_frames:.4g}"
            lines.append(f"{p.name:<20s} {p.value:>18.10g} {std:>12s} {sf:>12s}  {strongest}")
        for q in self.prior_summary():
            lines.append(f"prior {q['name']}={q['mean']:g}±{q['std']:g}: calibrated {q['value']:.6g} ± {q['value_std']:.3g} "
                         f"({q['offset_in_prior_sigma']:+.2f} σ of the prior)")
        return "\n".join(lines)

    def report(self) -> dict[str, object]:
        """JSON-ready summary (the ``report.json`` content)."""
        names, corr = self.correlation()
        return {
            "rmse": {k: float(v) for k, v in self.rmse.items()},
            "sum_squared_residuals": float(self.sum_squared_residuals),
            "n_bap": self.n_bap,
            "n_mic": self.n_mic,
            "n_frames": len(self.poses),
            "converged": self.converged,
            "converged_stages": {k: bool(v.get("converged", True)) for k, v in self.stages.items()},
            "iterations": self.solver.iterations,
            "termination": self.solver.termination,
            "cost_history": [float(c) for c in self.solver.cost_history],
            "gradient_norm": float(self.solver.gradient_norm),
            "predicted_relative_decrease": float(self.solver.predicted_relative_decrease),
            "wall_time_s": float(self.timings_s.get("total", float("nan"))),
            "timings_s": {k: float(v) for k, v in self.timings_s.items()},
            "noise_sigma_px": {k: float(v) for k, v in self.sigma.items()},
            "intra_cluster_correlation": {k: float(v) for k, v in self.intra_cluster_correlation.items()},
            "rejected": dict(self.rejected),
            "rejected_groups": self.rejected_groups,
            "downweighted": dict(self.downweighted),
            "parameters": {
                p.name: {"value": p.value, "std": p.std, "std_frames": p.std_frames, "frozen": p.frozen}
                for p in self.parameters()
            },
            "uncertainty_warnings": self.uncertainty_warnings(),
            "priors": self.prior_summary(),
            "frame_resampling": None if self.frame_resampling is None else {
                "frames_left_out": list(self.frame_resampling.frames),
                "converged": [bool(c) for c in self.frame_resampling.converged],
                "wall_time_s": self.frame_resampling.wall_time_s,
                "estimates": {n: [float(v) for v in self.frame_resampling.estimates[:, i]]
                              for i, n in enumerate(self.layout.intrinsic_names)},
            },
            "correlation": {"names": list(names), "matrix": corr.tolist()},
            "pupil": dict(self.pupil),
            "model_selection": self.model_selection,
            "stages": self.stages,
            "extrinsics_init": self.extrinsics.to_dict() if self.extrinsics else None,
            "options": dataclasses.asdict(self.options),
        }


def as_pinhole(camera: PlenopticCamera) -> PlenopticCamera:
    """The camera with pinhole micro-lenses (I = 0, no focal lengths; NOUR baseline)."""
    mla = camera.mla
    return camera.replace(
        mla=MicroLensArray(
            lattice=mla.lattice, pitch_mm=mla.pitch_mm, rotation_xyz_rad=mla.rotation_xyz_rad,
            translation_mm=mla.translation_mm, focal_lengths_mm=(), types=TypeLayout(0),
        )
    )


def prior_conflict_text(q: Mapping[str, Any]) -> str:
    """One sentence for a prior that conflicts with the data (an entry of
    :meth:`CalibrationResult.prior_summary`): what the data alone say, how far, what it moved."""
    head = f"prior {q['name']}={q['mean']:g}±{q['std']:g}"
    data = q.get("data_only")
    if isinstance(data, dict):
        moved = q.get("moved_in_data_sigma") or {}
        shift = ", ".join(f"{n} {v:+.1f}σ" for n, v in list(moved.items())[:3])
        s_data = max(float(data["std"]), float(data.get("std_frames") or 0.0))
        return (f"{head} conflicts with the data: without it they give {q['name']} = {data['value']:.5g} ± "
                f"{s_data:.2g}, {q['conflict_sigma']:.1f} combined σ from the prior's mean"
                + (f"; with it {shift} of the data's σ" if shift else "")
                + " (check the prior, or the model)")
    off = float(q["offset_in_prior_sigma"])
    return (f"{head}: the calibration puts it at {q['value']:.4g}, {off:+.1f} σ of the prior — the data disagree "
            "with it (check the prior, or the model)")


@dataclass(frozen=True)
class DataOnly:
    """The final stage re-solved without the user's priors (:func:`data_only_solution`).

    Attributes
    ----------
    x : ndarray, shape (layout.size,)
        The data-only solution.
    covariance : ndarray, shape (layout.size, layout.size)
        Its sandwich covariance.
    frame_estimates : ndarray, shape (n_frames, n_intrinsics) or None
        The intrinsics of its leave-one-frame-out re-solves (NaN rows where a re-solve did not
        converge), computed only where the Jacobian σ alone finds a conflict.
    """

    x: FloatArray
    covariance: FloatArray
    frame_estimates: FloatArray | None = None

    def _value_sigma(self, layout: ParameterLayout, name: str) -> tuple[float, float, float | None]:
        val, grad = quantity(layout, self.x, name)
        std = float(np.sqrt(max(float(grad @ self.covariance @ grad), 0.0)))
        std_frames = None
        if self.frame_estimates is not None:
            vals = []
            for row in self.frame_estimates:
                if np.all(np.isfinite(row[: layout.n_intrinsics])):
                    xi = self.x.copy()
                    xi[: layout.n_intrinsics] = row[: layout.n_intrinsics]
                    vals.append(quantity(layout, xi, name)[0])
            v = np.asarray(vals)
            if len(v) >= 2 and np.all(np.isfinite(v)):
                std_frames = float(np.sqrt((len(v) - 1) / len(v) * np.sum((v - v.mean()) ** 2)))
        return float(val), std, std_frames

    def judge(self, layout: ParameterLayout, x: FloatArray, prior: Prior) -> dict[str, object]:
        """The prior against the data alone (:data:`PRIOR_CONFLICT_SIGMA`), and how far the prior
        moved each free intrinsic, in the data-only solution's σ (largest first)."""
        val, std, std_frames = self._value_sigma(layout, prior.name)
        s_data = float(np.hypot(max(std, std_frames or 0.0), IMAGE_SYSTEMATIC.get(prior.name, 0.0)))
        z = abs(val - prior.mean) / float(np.hypot(s_data, prior.std)) if np.isfinite(val) else float("nan")
        sd = np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))
        n = layout.n_intrinsics
        moved = {}
        for i in np.flatnonzero(layout.free_mask[:n]):
            if sd[i] > 0:
                moved[layout.intrinsic_names[i]] = float((x[i] - self.x[i]) / sd[i])
        moved = dict(sorted(moved.items(), key=lambda kv: -abs(kv[1])))
        return {"data_only": {"value": val, "std": std, "std_frames": std_frames},
                "conflict_sigma": z, "conflicts_with_data": bool(np.isfinite(z) and z > PRIOR_CONFLICT_SIGMA),
                "moved_in_data_sigma": {k: v for k, v in list(moved.items())[:5]}}


def data_only_solution(res: Residuals, x: FloatArray, *, sigma: dict[str, float], active: FloatArray,
                       mu: float | None, opt: CalibrationOptions, frame_resampling: bool) -> DataOnly | None:
    """The final stage re-solved from ``x`` without the user's priors (``origin == "option"``; the
    defaults stay), with its covariance: what the data alone say of each prior's quantity.

    It keeps the observations the calibration kept: a prior that pulls the camera away makes the
    robust stage reject more (46 features instead of 6 with ``F_mm=45±1e-6`` on synthetic R12-A),
    and the re-solve then lands within a few σ of the prior-free calibration, not on it (1.5σ there)
    — enough to judge a conflict, at the cost of one plain solve instead of a whole calibration.

    Where the Jacobian σ finds a prior in conflict (:data:`PRIOR_CONFLICT_SIGMA`) and
    ``frame_resampling`` is on, the data-only solution's leave-one-frame-out re-solves are run too,
    so that a conflict is only claimed against the larger, mismatch-aware σ. None without user priors.
    """
    user = [p for p in opt.priors if p.origin == "option"]
    if not user:
        return None
    opt_d = dataclasses.replace(opt, priors=tuple(p for p in opt.priors if p.origin != "option"))
    xd, _ = levenberg_marquardt(res, x, sigma=sigma, loss="linear", active=active, ftol=opt.ftol, mu0=mu,
                                **_weights(opt_d, sigma))
    cov_d, _, _ = covariance(res, xd, sigma=sigma, active=active, clustered=opt.clustered_covariance,
                             **_weights(opt_d, sigma))
    data = DataOnly(xd, cov_d)
    if frame_resampling and any(data.judge(res.layout, x, p)["conflicts_with_data"] for p in user):
        fr = frame_jackknife(res, xd, sigma=sigma, active=active, mu0=mu, **_weights(opt_d, sigma))
        if fr is not None:
            data = dataclasses.replace(data, frame_estimates=fr.estimates)
    return data


MIN_TERM_SIGMA_PX = 1e-4
"""The smallest noise level σ_t a term is given. Below it the MAD measures the round-off of exact
(noise-free synthetic) observations, and the robust rounds chase it: the double-Gauss render's
features made by its truth camera (`benchmarks/exit_pupil_trace.py`, row "model") had σ_uv
2.4e-6 px after the group rejection, whose re-solve then ran its 500 iterations. Real σ are far
above: ρ 0.004–0.03 px, (u, v) 0.15–0.3 px, micro-image centres 0.04–0.08 px."""


def _term_sigma(res: Residuals, r: FloatArray, active: FloatArray, *, robust: bool) -> dict[str, float]:
    sl = res.term_slices()
    groups = {"uv": ("u", "v"), "rho": ("rho",), "mic": ("mic_u", "mic_v")}
    out = {}
    for term, names in groups.items():
        if names[0] not in sl:
            continue
        vals = np.concatenate([r[sl[n]][active[sl[n]] > 0] for n in names])
        if vals.size == 0:
            out[term] = 1.0
            continue
        s = robust_sigma(vals) if robust else float(np.sqrt(np.mean(vals**2)))
        out[term] = max(s, MIN_TERM_SIGMA_PX)
    return out


def _term_weights(opt: CalibrationOptions, sigma: dict[str, float]) -> dict[str, float] | None:
    """Weights of Θ's terms: None (1/σ_t², the solver's default) for ``weighting="noise"``; 1 for
    the paper's unweighted Θ, whose robust loss is still scaled by each term's σ_t."""
    return None if opt.weighting == "noise" else {k: 1.0 for k in sigma}


def _weights(opt: CalibrationOptions, sigma: dict[str, float], *, warm_start: bool = False) -> dict[str, Any]:
    """The solver's term weights and prior terms (w_p = w_uv·σ_uv²/σ_p², module priors) for one
    stage's noise levels.

    ``warm_start``: noise weights whatever ``opt.weighting``. The first stage starts from the
    initial poses, where the (u, v) residuals can be tens of pixels; unweighted, they swamp the
    centres' and ρ's terms and the solve can run down the degenerate F → 0 direction (synthetic
    R12-A, 3 of 40 perturbed starts). Weighted by their noise, the centres keep the geometry; the
    later stages then minimise the chosen Θ from there."""
    tw = None if warm_start else _term_weights(opt, sigma)
    if not opt.priors:
        return {"term_weights": tw, "priors": None}
    w_uv = 1.0 / sigma["uv"] ** 2 if tw is None else tw["uv"]
    return {"term_weights": tw, "priors": PriorTerms.build(opt.priors, uv_weight=w_uv, uv_sigma=sigma["uv"])}


def _rmse(res: Residuals, r: FloatArray, active: FloatArray) -> tuple[dict[str, float], float]:
    """RMSE per term (uv: per point, reference §9.1) and the plain sum of squares."""
    sl = res.term_slices()
    ra = r * active
    ssq = {n: float(np.sum(ra[s] ** 2)) for n, s in sl.items()}
    n_bap = float(active[sl["u"]].sum()) if res.n_bap else 0.0
    n_mic = float(active[sl["mic_u"]].sum()) if res.n_mic else 0.0
    out = {
        "uv_px": float(np.sqrt((ssq["u"] + ssq["v"]) / n_bap)) if n_bap else float("nan"),
        "mic_px": float(np.sqrt((ssq["mic_u"] + ssq["mic_v"]) / n_mic)) if n_mic else float("nan"),
    }
    if "rho" in sl:
        n_rho = float(active[sl["rho"]].sum())
        out["rho_px"] = float(np.sqrt(ssq["rho"] / n_rho)) if n_rho else float("nan")
    else:
        out["rho_px"] = float("nan")
    return out, float(sum(ssq.values()))


def _unit_active(res: Residuals, active: FloatArray) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Kept BAP features (all their observed rows active: a single view has no ρ row) and kept
    MICs, in the residual's row order."""
    sl = res.term_slices()
    keep_bap = active[sl["u"]] > 0
    if "rho" in sl:
        keep_bap &= (active[sl["rho"]] > 0) | ~res.rho_observed
    keep_mic = active[sl["mic_u"]] > 0
    return keep_bap, keep_mic


def calibrate(
    observations: Observations,
    initial: PlenopticCamera,
    board: Checkerboard,
    *,
    options: CalibrationOptions | None = None,
    initial_poses: Mapping[int, Pose] | None = None,
    frames: Iterable[int] | None = None,
    pupil_radii: MeasuredPupilRadii | None = None,
) -> CalibrationResult:
    """Calibrate the intrinsics (16 + I) and one pose per frame by minimising Θ (paper §5.2).

    See :func:`_calibrate` for the parameters. BLAS runs single-threaded inside (the matrices
    are small; threaded BLAS only adds contention).
    """
    opt = options or CalibrationOptions()
    forced = prior_terms(opt)
    with threadpool_limits(limits=1, user_api="blas"):
        result = _choose_model(observations, initial, board, opt, initial_poses=initial_poses, frames=frames,
                               pupil_radii=pupil_radii)
    if forced:
        result.model_selection = {g: {"kept": True, "reason": "the user's prior on its parameter"} for g in sorted(forced)} \
            | dict(result.model_selection or {})
    return result


def _choose_model(observations: Observations, initial: PlenopticCamera, board: Checkerboard, opt: CalibrationOptions, *,
                  initial_poses: Mapping[int, Pose] | None, frames: Iterable[int] | None,
                  pupil_radii: MeasuredPupilRadii | None) -> CalibrationResult:
    """:func:`calibrate` with the real-lens terms the options leave to the data chosen by them
    (:func:`real_lens_evidence`), recorded in the result's ``model_selection``."""
    def solve(o: CalibrationOptions, camera: PlenopticCamera) -> CalibrationResult:
        return _calibrate(observations, camera, board, options=o, initial_poses=initial_poses, frames=frames,
                          pupil_radii=pupil_radii)

    held = set(opt.freeze)
    not_offered = not_offered_terms(observations, opt)
    opt = with_terms(opt, {g: False for g in not_offered} | {g: True for g in prior_terms(opt)})
    auto = tuple(g for g in REAL_LENS_TERMS if getattr(opt, g) is None and not held >= set(OPTIONAL_GROUPS[g]))
    opt = with_terms(opt, {g: True for g in REAL_LENS_TERMS if getattr(opt, g) is None and g not in auto})
    if not auto:
        only = solve(opt, initial)
        only.model_selection = dict(not_offered)
        return only
    # The data choose the model, the user's priors then act within it: a prior that fights
    # the data would otherwise make the exit pupil "needed" (F_mm=45±1e-6 on thin-lens data).
    user_priors = any(p.origin == "option" for p in opt.priors)
    probe_opt = with_terms(dataclasses.replace(opt, priors=tuple(p for p in opt.priors if p.origin != "option")),
                           {g: True for g in auto})
    full = solve(probe_opt, initial)
    extra_s = full.timings_s["total"]
    if full.converged:
        evidence = real_lens_evidence(full, auto)
    elif set(auto) == set(REAL_LENS_TERMS):
        # The exit pupil is the fragile term (it slides with F and D); the curved field alone
        # may still be measured. Telephoto render: e free ran to 27 mm (F 35 mm, not converged).
        field_only = solve(dataclasses.replace(probe_opt, exit_pupil=False), without_real_lens_terms(initial, ["exit_pupil"]))
        extra_s += field_only.timings_s["total"]
        evidence = ({"depth_distortion": real_lens_evidence(field_only, ["depth_distortion"])["depth_distortion"]}
                    if field_only.converged else {"depth_distortion": {"kept": False, "reason": "did not converge"}})
        evidence["exit_pupil"] = {"kept": False, "reason": "the camera with the exit pupil free did not converge: "
                                                           "these images do not determine it"}
    else:
        evidence = {g: {"kept": False, "reason": "the camera with every real-lens term did not converge"} for g in auto}
    evidence = dict(not_offered) | pupil_with_a_curved_field(evidence)
    judged: tuple[list[str], CalibrationResult] | None = None
    if full.converged and not user_priors and "exit_pupil" in auto and evidence["exit_pupil"]["kept"] \
            and opt.white_radius_slope_mm:
        keep = {g: g != "exit_pupil" and bool(evidence[g]["kept"]) for g in auto}
        judged = ([g for g in auto if not keep[g]], solve(with_terms(opt, keep), without_real_lens_terms(initial, [g for g in auto if not keep[g]])))
        if judged[1].converged:
            evidence["exit_pupil"] = whites_judge_the_pupil(evidence["exit_pupil"], full, judged[1],
                                                            white_slope_mm=opt.white_radius_slope_mm)
    dropped = [g for g in auto if not evidence[g]["kept"]]
    if judged is not None and judged[0] != dropped:
        extra_s += judged[1].timings_s["total"]  # a camera not chosen: the model selection's cost
    if not dropped and not user_priors:
        full.model_selection = evidence
        return full
    # the camera the whites judged is the one without e: the same solve
    chosen = judged[1] if judged is not None and judged[0] == dropped else \
        solve(with_terms(opt, {g: g not in dropped for g in auto}), without_real_lens_terms(initial, dropped))
    if dropped and not chosen.converged and full.converged and not user_priors:
        # The data cannot tell: keep the camera that converged.
        for g in dropped:
            evidence[g] = evidence[g] | {"kept": True, "reason": "the camera without it did not converge"}
        full.model_selection = evidence
        return full
    if "exit_pupil" in dropped and chosen.converged and (not full.converged or evidence["depth_distortion"]["kept"]):
        # A lens the data show not to be thin, whose exit pupil they cannot place: how far the
        # scale moves if the pupil is not in the principal plane (the verdict judges it).
        probe = solve(with_terms(opt, {g: g not in dropped for g in auto} | {"exit_pupil": False}),
                      without_real_lens_terms(initial, dropped).replace(
                          main_lens=dataclasses.replace(initial.main_lens, exit_pupil_mm=EXIT_PUPIL_PROBE_MM)))
        extra_s += probe.timings_s["total"]
        F0, F1 = chosen.camera.main_lens.focal_length_mm, probe.camera.main_lens.focal_length_mm
        D0, D1 = chosen.camera.D_mm, probe.camera.D_mm
        before = {p.name: p.value for p in chosen.parameters() if not p.frozen}
        evidence["exit_pupil"] = evidence["exit_pupil"] | {"scale_probe": {
            "exit_pupil_mm": EXIT_PUPIL_PROBE_MM, "F_mm": F1, "D_mm": D1, "converged": probe.converged,
            "F_change_percent": 100.0 * (F1 / F0 - 1.0), "D_change_percent": 100.0 * (D1 / D0 - 1.0),
            # every other parameter's change too (pupil_systematic: their σ through e)
            "changes": {p.name: p.value - before[p.name] for p in probe.parameters() if p.name in before}}}
        if probe.converged and opt.white_radius_slope_mm:
            # what the whites say of the probe's pupil (pupil_systematic.whites_pupil_range)
            evidence["exit_pupil"]["white_slope"] = white_slope_record(
                probe, chosen, white_slope_mm=opt.white_radius_slope_mm) | {"exit_pupil_mm": EXIT_PUPIL_PROBE_MM}
    chosen.model_selection = evidence
    chosen.timings_s["model_selection"] = extra_s
    chosen.timings_s["total"] += extra_s
    return chosen


WHITE_SLOPE_PUPIL_MARGIN = 0.01
"""An exit pupil the data keep is left out when the camera with it is further from the white images'
radius-law slope m (Ω's; m = d·(F − e)/(2(D − e)), :func:`plenocal.calib.plausibility.radius_slope`)
than the camera without it, by more than this (relative). The whites measure the exit pupil's image
through the lenslets independently of the checkerboards; with e right the camera is within 1 % of
them. Measured, camera with e / without: the real-optics R12-B (e 9.35 mm) −0.48 / +0.87 % and
plenocal's double-Gauss render (−7.3 mm) +0.02 / −1.17 %: kept; the Tessar render (0.8 mm; the
images put e at 15.3 mm, F −6.3 %) −4.55 / +0.28 %, and a thin-lens render of boards near the MLA's
conjugate (8 frames; e kept at 18.5 ± 5.3 mm, W 12.3, F −8 %) −7.9 / +0.13 %: left out, F then
−0.24 % and −0.01 %."""


def whites_judge_the_pupil(pupil: dict[str, object], with_e: CalibrationResult, without_e: CalibrationResult, *,
                           white_slope_mm: float, margin: float = WHITE_SLOPE_PUPIL_MARGIN) -> dict[str, object]:
    """The exit pupil's model-selection record with the white images' verdict on it
    (:data:`WHITE_SLOPE_PUPIL_MARGIN`): ``white_slope`` {``with``, ``without``: the relative
    distance of each camera's radius-law slope from the whites'}, and ``kept`` False when the camera
    with e is the further by more than ``margin``."""
    ws = white_slope_record(with_e, without_e, white_slope_mm=white_slope_mm, margin=margin)
    rel_with, rel_without = ws["with"], ws["without"]
    out = pupil | {"white_slope": ws}
    if abs(rel_with) > abs(rel_without) + margin:
        out |= {"kept": False, "reason": f"{pupil.get('reason', 'kept')}, but the white images' radius-law slope is "
                                         f"{100 * rel_with:+.1f} % from the camera with it and {100 * rel_without:+.1f} % "
                                         "without: the checkerboards took something else for a pupil"}
    return out


def white_slope_record(with_e: CalibrationResult, without_e: CalibrationResult, *, white_slope_mm: float,
                       margin: float = WHITE_SLOPE_PUPIL_MARGIN) -> dict[str, float]:
    """{``with``, ``without``: the relative distance of the radius-law slope of the camera with an
    exit pupil off its principal plane and of the one without from the white images' slope,
    ``margin``}."""
    from plenocal.calib.plausibility import radius_slope

    return {"with": float(radius_slope(with_e.layout, with_e.x)[0] / white_slope_mm - 1.0),
            "without": float(radius_slope(without_e.layout, without_e.x)[0] / white_slope_mm - 1.0), "margin": float(margin)}


def prior_terms(options: CalibrationOptions) -> set[str]:
    """The real-lens terms the data would choose (flag None) on one of whose parameters the user gave
    a prior: the user says the lens has it, so it is in (``--prior exit_pupil_mm=13.2±1`` on the
    telephoto render, whose images cannot place e and whose choice left it out: "unknown quantity
    exit_pupil_mm" — with it, F −0.35 %)."""
    named = {p.name for p in options.priors if p.origin == "option"}
    return {g for g, params in OPTIONAL_GROUPS.items() if getattr(options, g) is None and named & set(params)}


def with_terms(options: CalibrationOptions, terms: Mapping[str, bool | None]) -> CalibrationOptions:
    """``options`` with the real-lens terms' flags (:data:`REAL_LENS_TERMS`: ``exit_pupil``,
    ``depth_distortion``; None lets the data choose) set as ``terms`` gives them."""
    unknown = set(terms) - set(REAL_LENS_TERMS)
    if unknown:
        raise ValueError(f"not real-lens terms: {sorted(unknown)}")
    return dataclasses.replace(options, exit_pupil=terms.get("exit_pupil", options.exit_pupil),
                               depth_distortion=terms.get("depth_distortion", options.depth_distortion))


EXIT_PUPIL_PROBE_MM = 10.0
"""Where the exit pupil is put to probe the scale when the data show a real lens but cannot place
its pupil (e left out): F calibrated again with e fixed here, the change recorded in
``model_selection.exit_pupil.scale_probe`` for the verdict (the spread of e's estimates through
real micro-lenses, :data:`plenocal.calib.priors.IMAGE_SYSTEMATIC`). Telephoto render (e
13.2 mm): with e at 0, F +4.5 % at 10σ; with e at the truth, F −0.35 %."""

REAL_LENS_TERMS = tuple(OPTIONAL_GROUPS)
"""The :class:`CalibrationOptions` flags of the real-lens terms that the data choose by default
(the layout's optional groups: ``exit_pupil``, ``depth_distortion``)."""

THIN_PUPIL_POSITIONS = frozenset({POSITIONS_TEMPLATE_FIT})
"""Observations whose (u, v) are not offered the exit pupil by default (``--exit-pupil`` or a prior
on ``exit_pupil_mm`` still frees it): libpleno's template-fit corners, which are neither chief rays
nor the apparent positions plenocal's pupil-vignetting shift predicts (on the reference's real
R12-A observations the chief ray fits them best: the shift, at 0.1 to 1 times its size, raises the
least-squares cost by 0.1 to 17 %). There the exit pupil absorbs the (u, v) model's misfit instead of
measuring a pupil: in every one of the 20 model × weighting × loss configurations it was kept
(W up to 5·10⁴, e 24–29 mm) and 11 of them wrote cameras with F 37.7–47.5 mm and the principal
point 500–830 px from the sensor centre, with σ_F 1.3–3.6 mm (the paper's BAP, NOUR and RxLive
cameras of the same images span F 47.7–54.9 mm, each with the pupil in the lens plane). With e
left out the same 20 configurations are each refused by the radius-slope check in 4–10 s."""

REAL_LENS_TERM_FALSE_ALARM = 1e-3
"""Probability that a real-lens term (the exit pupil e; the depth distortion Z1, Z2) is kept for a
lens that has none: its Wald statistic against the thin lens (0) is compared with the upper
χ²_k quantile at this probability (k = 1 for e, 2 for Z1, Z2; 10.8 and 13.8). Measured W (e; Z):
thin-lens data — the 6-frame demo render 0.1; 11.5, synthetic R12-A 0.4; 3.6, PRISM's R12-B 0.5;
—; synthetic R12-A with the exit pupil 9.35 mm behind H′ 21.9; 2.3, 7.3 mm in front 35.7; 5.1;
the real-optics R12-B (a Cooke triplet, pupils ~1 cm from H, H′) 205; 2475 (``docs/model.md``,
"A real main lens")."""

REAL_LENS_TEST_SIGMA = {"exit_pupil": "jacobian", "depth_distortion": "larger"}
"""Which σ each real-lens term's Wald test uses: the Jacobian's, or the larger of it and the frame
jackknife's. The depth distortion's Jacobian σ is optimistic where the ρ residuals share errors that
no noise model has: on the thin-lens demo renders Z1, Z2 reach W = 11.5 (6 frames) and 15.0
(8 frames, above 13.8) with it, 0.5 and ~4 with the larger σ; real curved fields stay far above
(the real-optics R12-B ~500, the double-Gauss render 10⁴). The exit pupil's jackknife σ is too
noisy with 6–10 frames: it would leave out a 9.35 mm pupil (W 5.2 against 21.9)."""

EXIT_PUPIL_WITH_FIELD_SIGMA_FRACTION = 0.2
"""The exit pupil goes with a curved field (:func:`pupil_with_a_curved_field`) only when the data
bound it: its σ at most this fraction of F. Beyond, e only wanders and drags F and D with it (the
8-frame demo render: σ_e 39 mm, e −50 mm, F +7.5 %); the real-optics R12-B has σ_e 1.8 mm, PRISM's
R12-B 2.0 mm."""


def not_offered_terms(observations: Observations, options: CalibrationOptions) -> dict[str, dict[str, object]]:
    """The real-lens terms left to the data (``None`` in ``options``) that these observations are
    not offered (:data:`THIN_PUPIL_POSITIONS`), each with the reason, in ``model_selection``'s form."""
    asked = any(p.name == "exit_pupil_mm" for p in options.priors)
    if options.exit_pupil is not None or asked or observations.positions not in THIN_PUPIL_POSITIONS:
        return {}
    return {"exit_pupil": {"kept": False, "offered": False,
                           "reason": f"not offered for {observations.positions} (u, v): on such observations e absorbs "
                                     "the (u, v) model's misfit rather than measuring a pupil (--exit-pupil frees it)"}}


def real_lens_evidence(result: CalibrationResult, terms: Iterable[str], *,
                       false_alarm: float = REAL_LENS_TERM_FALSE_ALARM) -> dict[str, dict[str, object]]:
    """Whether the data support each real-lens term of a calibration that estimated it.

    The Wald statistic W = θᵀ S⁻¹ θ of the term's parameters θ against the thin lens (θ = 0), with
    S their block of the calibration's (clustered sandwich) covariance; kept when W exceeds χ²_k's
    quantile at ``false_alarm``. Not the frame jackknife's σ: with the 6–10 frames of a
    calibration it is itself too noisy to test with (σ_e 3.4 mm against the Jacobian's 2.0 on
    synthetic R12-A observations of a pupil 9.35 mm behind H′, which it would then leave out, and
    F 2.9 % off with it).
    """
    est = {p.name: p for p in result.parameters()}
    names = list(result.layout.intrinsic_names)
    sd = result.std[: len(names)]
    corr = result.covariance[: len(names), : len(names)] / np.outer(np.where(sd > 0, sd, 1.0), np.where(sd > 0, sd, 1.0))
    out: dict[str, dict[str, object]] = {}
    for term in terms:
        params = OPTIONAL_GROUPS[term]
        idx = [names.index(n) for n in params]
        theta = np.array([est[n].value for n in params])
        s = sd[idx] if REAL_LENS_TEST_SIGMA[term] == "jacobian" else np.array([est[n].std_max for n in params])
        cov = corr[np.ix_(idx, idx)] * np.outer(s, s)
        try:
            w = float(theta @ np.linalg.solve(cov, theta))
        except np.linalg.LinAlgError:
            w = float("nan")
        threshold = float(chi2_isf(false_alarm, len(params)))
        kept = bool(np.isfinite(w) and w > threshold)
        out[term] = {"kept": kept, "wald": w, "threshold": threshold, "dof": len(params),
                     "values": {n: float(est[n].value) for n in params}, "std": {n: float(v) for n, v in zip(params, s, strict=True)},
                     "sigma": REAL_LENS_TEST_SIGMA[term], "focal_length_mm": float(est["F_mm"].value),
                     "reason": (f"W = {w:.1f} {'>' if kept else '<='} {threshold:.1f} (χ²_{len(params)}, "
                                f"false alarm {false_alarm:g})")}
    return out


def pupil_with_a_curved_field(evidence: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """The exit pupil kept whenever the depth distortion is: a lens the data show not to be thin
    has no reason to have its pupil in its principal plane, and e fixed at 0 there hides its
    uncertainty from F and D — when the data bound e (:data:`EXIT_PUPIL_WITH_FIELD_SIGMA_FRACTION`).
    Measured on the real-optics R12-B (the 7 081 micro-image centres
    that follow the projective lattice do not determine e: W = 0.7): e fixed at 0 gives F +0.68 %
    at 5σ and D +0.96 % at 7σ; e free (its prior N(0, F²)), F +0.55 % at 2.2σ and D +0.82 % at
    3.3σ; e at the truth, F −0.32 %, D −0.05 %."""
    pupil, field_ = evidence.get("exit_pupil"), evidence.get("depth_distortion")
    if pupil is None or field_ is None or pupil["kept"] or not field_["kept"]:
        return evidence
    std: Any = pupil.get("std") or {}
    sigma_e = float(next(iter(std.values()), float("inf")))
    focal: Any = pupil.get("focal_length_mm", float("nan"))
    if not sigma_e <= EXIT_PUPIL_WITH_FIELD_SIGMA_FRACTION * float(focal):
        return evidence
    return evidence | {"exit_pupil": pupil | {"kept": True, "reason": f"{pupil['reason']}, but kept with the depth distortion "
                                              "(a lens that is not thin: e free carries its uncertainty into F and D)"}}


def without_real_lens_terms(camera: PlenopticCamera, terms: Iterable[str]) -> PlenopticCamera:
    """The camera with the named real-lens terms at the thin lens's values (e = 0; Z1 = Z2 = 0)."""
    terms = set(terms)
    if "exit_pupil" in terms:
        camera = camera.replace(main_lens=dataclasses.replace(camera.main_lens, exit_pupil_mm=0.0))
    if "depth_distortion" in terms:
        camera = camera.replace(distortion=dataclasses.replace(camera.distortion, z1=0.0, z2=0.0))
    return camera


def _calibrate(
    observations: Observations,
    initial: PlenopticCamera,
    board: Checkerboard,
    *,
    options: CalibrationOptions | None = None,
    initial_poses: Mapping[int, Pose] | None = None,
    frames: Iterable[int] | None = None,
    pupil_radii: MeasuredPupilRadii | None = None,
) -> CalibrationResult:
    """Calibrate the intrinsics (16 + I) and one pose per frame by minimising Θ (paper §5.2).

    The stages, each a function below: initial poses (:func:`_initial_poses`), the MLA from the
    micro-image centres (:func:`_mla_stage`), poses consistent with the plenoptic model
    (:func:`_pose_stage`), the robust joint stage with group and single rejection
    (:func:`_robust_stage`), the final plain least squares (:func:`_final_stage`), then σ (the
    covariance, the frame jackknife) and the data-only re-solve.

    Parameters
    ----------
    observations : Observations
        BAP features (linked to nodes, or with detector cluster ids to be linked) and MICs.
    initial : PlenopticCamera
        Initial camera (paper §3.3, :func:`plenocal.model.white.initial_camera`).
    board : Checkerboard
    options : CalibrationOptions
    initial_poses : mapping frame → Pose, optional
        Skip the barycentre initialisation for these frames.
    frames : iterable of int, optional
        Frames to use (default: every frame of the BAP features).
    pupil_radii : MeasuredPupilRadii, optional
        With ``options.pupil_vignetting``: the shift's R_a, R_b as the white images measured them
        (recommended); default the camera's radius law, which moves with Θ.

    Returns
    -------
    CalibrationResult

    Raises
    ------
    DataError
        No frame could be initialised, or no observations.
    """
    opt = options or CalibrationOptions()
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    stages: dict[str, dict[str, object]] = {}
    bap = observations.bap
    if frames is not None:
        bap = bap.select(np.isin(bap.frame, np.fromiter(frames, dtype=np.int64)))
    if len(bap) == 0:
        raise DataError("no BAP features to calibrate from")
    if opt.rho_form is not None:
        initial = initial.replace(rho_form=RhoForm(opt.rho_form))
    camera0 = as_pinhole(initial) if opt.pinhole_micro_lenses else initial

    t0 = time.perf_counter()
    bap, poses0, ext = _initial_poses(camera0, bap, board, initial_poses)
    timings["extrinsics"] = time.perf_counter() - t0

    mic = observations.mic if opt.use_mic else MicroImageCentres.empty()
    layout = ParameterLayout(camera0, tuple(sorted(poses0)), two_pitches=opt.two_pitches, frozen=frozenset(opt.freeze),
                             exit_pupil=bool(opt.exit_pupil), depth_distortion=bool(opt.depth_distortion))
    if (opt.exit_pupil and layout.free_mask[layout.index["exit_pupil_mm"]]
            and not any(p.name == "exit_pupil_mm" for p in opt.priors)):
        opt = dataclasses.replace(opt, priors=(*opt.priors, exit_pupil_prior(camera0.main_lens.focal_length_mm)))
    check_priors(layout, opt.priors)
    x = layout.pack(camera0, poses0)

    t0 = time.perf_counter()
    x, stages_mla = _mla_stage(layout, camera0, mic, board, x, opt=opt)
    stages.update(stages_mla)
    timings["mla"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    x, stages_pose = _pose_stage(layout, bap, board, x, opt=opt, pupil_radii=pupil_radii)
    stages.update(stages_pose)
    timings["poses"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    res = Residuals(layout, bap, mic, board, pupil_vignetting=opt.pupil_vignetting, pupil_radii=pupil_radii)
    rob = _robust_stage(res, x, opt=opt, pupil_radii=pupil_radii)
    stages.update(rob.stages)
    layout, res, x = rob.residuals.layout, rob.residuals, rob.x
    timings["robust"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    x, rep, sig, mu, stages_final = _final_stage(res, x, rob.active, mu=rob.mu, opt=opt)
    stages.update(stages_final)
    timings["final"] = time.perf_counter() - t0

    active = rob.active
    unc = _uncertainty_stage(res, x, active, sigma=sig, mu=mu, opt=opt, timings=timings)
    r = res.residuals(x)
    rmse, ssq = _rmse(res, r, active)
    keep_bap, keep_mic = _unit_active(res, active)
    camera, poses = layout.unpack(x)
    timings["total"] = time.perf_counter() - t_start
    return CalibrationResult(
        camera=camera,
        poses=poses,
        layout=layout,
        x=x,
        covariance=unc.covariance,
        sigma=unc.sigma_hat,
        rmse=rmse,
        sum_squared_residuals=ssq,
        n_bap=int(keep_bap.sum()),
        n_mic=int(keep_mic.sum()),
        rejected=rob.rejected,
        downweighted=rob.downweighted,
        rejected_features=BapFeatures.concatenate([rob.group_rejected, res.bap.select(~keep_bap)]),
        rejected_groups=rob.groups.to_dict() if rob.groups is not None else {},
        kept_bap=res.bap.select(keep_bap),
        kept_mic=res.mic.select(keep_mic),
        solver=rep,
        stages=stages,
        timings_s=timings,
        extrinsics=ext,
        options=opt,
        intra_cluster_correlation=unc.intra_cluster_correlation,
        frame_resampling=unc.frame_resampling,
        data_only=unc.data_only,
        pupil={"vignetting": res.pupil_vignetting} | ({"radii": "camera radius law" if pupil_radii is None
                                                         else "white images (Ω)"} if res.pupil_vignetting else {}),
    )


@dataclass(frozen=True)
class _Uncertainty:
    """What :func:`_uncertainty_stage` estimates of the solution."""

    covariance: Any
    sigma_hat: Any
    intra_cluster_correlation: Any
    frame_resampling: Any
    data_only: Any


def _uncertainty_stage(res: Residuals, x: FloatArray, active: Any, *, sigma: Any, mu: float | None, opt: CalibrationOptions,
                       timings: dict[str, float]) -> _Uncertainty:
    """The solution's uncertainty: the covariance (:func:`covariance`), the frame jackknife
    (``opt.frame_resampling``, :func:`frame_jackknife`) and the data-only re-solve of the priors
    (:func:`data_only_solution`); each one's wall time into ``timings``."""
    t0 = time.perf_counter()
    cov, sigma_hat, icc = covariance(res, x, sigma=sigma, active=active, clustered=opt.clustered_covariance,
                                     **_weights(opt, sigma))
    timings["covariance"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    resampling = frame_jackknife(res, x, sigma=sigma, active=active, mu0=mu, **_weights(opt, sigma)) \
        if opt.frame_resampling else None
    timings["frame_resampling"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    data_only = data_only_solution(res, x, sigma=sigma, active=active, mu=mu, opt=opt,
                                   frame_resampling=opt.frame_resampling)
    if data_only is not None:
        timings["data_only"] = time.perf_counter() - t0
    return _Uncertainty(cov, sigma_hat, icc, resampling, data_only)


def _initial_poses(camera: PlenopticCamera, bap: BapFeatures, board: Checkerboard,
                   initial_poses: Mapping[int, Pose] | None) -> tuple[BapFeatures, dict[int, Pose], ExtrinsicsInit | None]:
    """Stage 1: a pose per frame (the given ones, else the barycentre initialisation, which also
    links clusters to nodes), and the BAP features of the frames that have one, linked.

    Raises
    ------
    DataError
        No frame could be initialised.
    """
    ext: ExtrinsicsInit | None = None
    frames = np.unique(bap.frame)
    if initial_poses is not None and all(int(f) in initial_poses for f in frames) and np.all(bap.node >= 0):
        poses0 = {int(f): initial_poses[int(f)] for f in frames}
    else:
        ext = initial_extrinsics(camera, bap, board)
        poses0 = dict(ext.poses)
        if initial_poses is not None:
            poses0.update({int(f): initial_poses[int(f)] for f in frames if int(f) in initial_poses})
        assert ext.bap is not None
        bap = ext.bap
    bap = bap.select(np.isin(bap.frame, np.array(sorted(poses0), dtype=np.int64)) & (bap.node >= 0))
    if not poses0 or len(bap) == 0:
        raise DataError("no frame could be initialised (see the extrinsics report)")
    return bap, poses0, ext


def _mla_stage(layout: ParameterLayout, camera: PlenopticCamera, mic: MicroImageCentres, board: Checkerboard,
               x: FloatArray, *, opt: CalibrationOptions) -> tuple[FloatArray, dict[str, dict[str, object]]]:
    """Stage 2: the MLA's in-plane pose and pitch from the micro-image centres alone (nothing to
    fit when ``--freeze`` holds them all, or without centres)."""
    mla_free = [n for n in ("theta_z_rad", "tx_mm", "ty_mm", *layout.groups["pitch"]) if layout.free_mask[layout.index[n]]]
    if not len(mic) or not mla_free:
        return x, {}
    lay_m = ParameterLayout(camera, (), two_pitches=opt.two_pitches, exit_pupil=layout.exit_pupil,
                            depth_distortion=layout.depth_distortion,
                            frozen=frozenset(set(layout.intrinsic_names) - set(mla_free)))
    res_m = Residuals(lay_m, BapFeatures.empty(), mic, board, use_rho=False)
    xm, rep_m = levenberg_marquardt(res_m, x[: layout.n_intrinsics], sigma={"uv": 1.0, "rho": 1.0, "mic": 1.0}, ftol=1e-10)
    x = x.copy()
    x[: layout.n_intrinsics] = xm
    return x, {"mla": rep_m.to_dict()}


def _pose_stage(layout: ParameterLayout, bap: BapFeatures, board: Checkerboard, x: FloatArray, *,
                opt: CalibrationOptions, pupil_radii: MeasuredPupilRadii | None
                ) -> tuple[FloatArray, dict[str, dict[str, object]]]:
    """Stage 3: poses consistent with the plenoptic model (triangulated virtual points), then,
    with ``opt.pose_iterations``, refined on (u, v) with the intrinsics fixed."""
    cam_now = layout.unpack_camera(x)
    poses_t = plenoptic_poses(cam_now, bap, board, layout.unpack_poses(x))
    x = layout.pack(cam_now, poses_t)
    if opt.pose_iterations <= 0:
        return x, {}
    lay_p = layout.with_frozen(set(layout.frozen) | {"intrinsics"})
    res_p = Residuals(lay_p, bap, MicroImageCentres.empty(), board, use_rho=False,
                      pupil_vignetting=opt.pupil_vignetting, pupil_radii=pupil_radii)
    r = res_p.residuals(x)
    sig_p = _term_sigma(res_p, r, np.ones_like(r), robust=True)
    sig_p["mic"] = 1.0
    x, rep_p = levenberg_marquardt(res_p, x, sigma=sig_p, loss="huber", loss_scale=opt.huber_threshold,
                                   ftol=1e-6, max_iterations=opt.pose_iterations)
    return x, {"poses": rep_p.to_dict()}


@dataclass
class _Robust:
    """What the robust joint stage hands on (:func:`_robust_stage`)."""

    residuals: Residuals
    x: FloatArray
    active: FloatArray
    mu: float | None
    rejected: dict[str, int]
    downweighted: dict[str, int]
    group_rejected: BapFeatures
    groups: GroupRejection | None
    stages: dict[str, dict[str, object]]


def _robust_stage(res: Residuals, x: FloatArray, *, opt: CalibrationOptions,
                  pupil_radii: MeasuredPupilRadii | None) -> _Robust:
    """Stage 4: Huber rounds (σ_t by MAD before each); then gross errors rejected as groups (a
    mislinked cluster, a frame that does not fit: :mod:`plenocal.calib.robust`), the problem
    rebuilt without them and the last round solved again, so that they drag nothing; then single
    units beyond the χ² quantile of ``opt.reject_probability`` deactivated. With
    ``opt.loss == "linear"`` nothing is done."""
    out = _Robust(res, x, res.observed_rows.copy(), None, {"bap": 0, "mic": 0, "uv": 0, "rho": 0}, {},
                  BapFeatures.empty(), None, {})
    if opt.loss != "huber":
        return out
    mu: float | None = None
    active = out.active
    n_rounds = max(1, opt.huber_rounds)
    for rnd in range(n_rounds):
        sig = _term_sigma(res, res.residuals(x), active, robust=True)
        warm_up = rnd < n_rounds - 1
        x, rep_r = levenberg_marquardt(res, x, sigma=sig, loss="huber", loss_scale=opt.huber_threshold,
                                       ftol=1e-6 if warm_up else 1e-10, mu0=mu,
                                       max_iterations=opt.warmup_iterations if warm_up else MAX_ITERATIONS,
                                       **_weights(opt, sig, warm_start=rnd == 0))
        mu = rep_r.damping
        out.stages[f"robust_{rnd}"] = rep_r.to_dict() | {"sigma": sig} | ({"warm_up": True} if warm_up else {})
    r = res.residuals(x)
    sig = _term_sigma(res, r, active, robust=True)
    sl = res.term_slices()
    groups = reject_groups(r[sl["u"]], r[sl["v"]], res.bap.frame, res.bap.node, sigma_uv=sig["uv"],
                           gross_probability=opt.reject_probability)
    if groups.any:
        if not groups.keep.any():
            raise DataError("every cluster of every frame has gross (u, v) residuals: the observations do not "
                            "fit this camera (check that they belong to its dataset and target)")
        out.group_rejected = res.bap.select(~groups.keep)
        layout = res.layout
        cam_now, poses_now = layout.unpack(x)
        kept_frames = set(np.unique(res.bap.frame[groups.keep]).tolist())
        layout = dataclasses.replace(layout, frames=tuple(f for f in layout.frames if f in kept_frames))
        x = layout.pack(cam_now, {f: poses_now[f] for f in layout.frames})
        res = Residuals(layout, res.bap.select(groups.keep), res.mic, res.board, pupil_vignetting=opt.pupil_vignetting,
                        pupil_radii=pupil_radii)
        active = res.observed_rows.copy()
        x, rep_r = levenberg_marquardt(res, x, sigma=sig, loss="huber", loss_scale=opt.huber_threshold,
                                       ftol=1e-10, mu0=mu, **_weights(opt, sig))
        mu = rep_r.damping
        out.stages["robust_groups"] = rep_r.to_dict() | {"sigma": sig}
    r = res.residuals(x)
    sig = _term_sigma(res, r, active, robust=True)
    from plenocal.calib.solver import Units

    s = Units(res, sig).norms(r)
    thr = chi2_thresholds(opt.reject_probability)
    bad_uv = s["uv"] > thr["uv"]
    bad_rho = s["rho"] > thr["rho"] if "rho" in s else np.zeros_like(bad_uv)
    bad_bap = bad_uv | bad_rho
    bad_mic = s["mic"] > thr["mic"]
    sl = res.term_slices()
    for n in ("u", "v", "rho"):
        if n in sl:
            active[sl[n]] = np.where(bad_bap, 0.0, res.observed_rows[sl[n]])
    active[sl["mic_u"]] = np.where(bad_mic, 0.0, 1.0)
    active[sl["mic_v"]] = np.where(bad_mic, 0.0, 1.0)
    out.residuals, out.x, out.active, out.mu, out.groups = res, x, active, mu, groups
    out.downweighted = {k: int(np.sum(v > opt.huber_threshold)) for k, v in s.items()}
    out.rejected = {"bap": int(bad_bap.sum()) + len(out.group_rejected), "uv": int(bad_uv.sum()),
                    "rho": int(np.sum(bad_rho)), "mic": int(bad_mic.sum()), "clusters": len(groups.clusters),
                    "frames": len(groups.frames), "in_groups": len(out.group_rejected)}
    return out


def _final_stage(res: Residuals, x: FloatArray, active: FloatArray, *, mu: float | None, opt: CalibrationOptions
                 ) -> tuple[FloatArray, SolverReport, dict[str, float], float | None, dict[str, dict[str, object]]]:
    """Stage 5: plain least squares on the kept observations (from a noise-weighted warm start when
    no robust stage ran: see :func:`_weights`), the noise weights re-estimated until they settle
    (at most 3 solves). Returns x, the last solver report, the terms' σ, the damping and the
    stages' reports."""
    stages: dict[str, dict[str, object]] = {}
    if opt.loss != "huber" and opt.weighting == "none":
        sig = _term_sigma(res, res.residuals(x), active, robust=False)
        x, rep_w = levenberg_marquardt(res, x, sigma=sig, loss="linear", active=active, ftol=1e-6, mu0=mu,
                                       **_weights(opt, sig, warm_start=True))
        mu = rep_w.damping
        stages["warm_start"] = rep_w.to_dict() | {"sigma": sig}
    rep = None
    for _ in range(3):
        sig = _term_sigma(res, res.residuals(x), active, robust=False)
        x, rep = levenberg_marquardt(res, x, sigma=sig, loss="linear", active=active, ftol=opt.ftol, mu0=mu,
                                     **_weights(opt, sig))
        mu = rep.damping
        new = _term_sigma(res, res.residuals(x), active, robust=False)
        if opt.weighting == "none" or all(abs(new[k] / sig[k] - 1) < 0.02 for k in sig):
            break
    assert rep is not None
    stages["final"] = rep.to_dict()
    return x, rep, sig, mu, stages
