"""Reprojection residuals and RMSEs of a camera on observations (reference §9.1).

Residuals are ``observed − model`` for every BAP feature linked to a checkerboard node
(``node >= 0``) whose frame has a pose, through :func:`plenocal.model.project_bap`, and for
every micro-image centre through :func:`plenocal.model.micro_image_centres`. Everything is
vectorised over observations; the only loops run over groups (frames, lens types) via
``np.bincount``.

RMSEs (reference §9.1), with N BAP points and M centres:

- ``uv_px`` = √(Σ‖e_uv‖²/N) (N counts points, not coordinates);
- ``rho_px`` = √(Σe_ρ²/N);
- ``bap_px`` = √(Σ(‖e_uv‖² + e_ρ²)/N);
- ``mic_px`` = √(Σ‖e_mic‖²/M);
- ``total_px`` = √((Σ_uv + Σ_ρ + Σ_mic)/(M + 2N)) (libpleno's TOTAL);
- ``sum_squared_residuals`` = Σe_u² + Σe_v² + Σe_ρ² + Σe_mic,u² + Σe_mic,v² (plain sum).

Features whose frame has no pose, and unlinked features (``node < 0``), are counted and
reported as skipped, never silently dropped.

The headline RMSEs count the observations *kept* by calibration's χ² rejection rule
(:mod:`plenocal.evaluate.outliers`); the rejected ones are counted per reason and per frame,
listed one by one, and their effect shown as the RMSE over all observations
(:class:`Rejection`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError
from plenocal.evaluate.outliers import DEFAULT_REJECT_PROBABILITY, RULE, OutlierSplit, split_outliers
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import Observations
from plenocal.model.projection import micro_image_centres, project_bap
from plenocal.model.target import Checkerboard

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def _pose_stack(poses: dict[int, Pose], frames: NDArray) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
    """Per-observation rotation (N, 3, 3) and translation (N, 3); ``has`` marks known frames."""
    keys = np.array(sorted(poses), dtype=np.int64)
    if keys.size == 0:
        n = frames.size
        return np.zeros((n, 3, 3)), np.zeros((n, 3)), np.zeros(n, dtype=bool)
    R = np.stack([poses[int(f)].rotation for f in keys])
    t = np.stack([poses[int(f)].translation for f in keys])
    idx = np.clip(np.searchsorted(keys, frames), 0, keys.size - 1)
    has = keys[idx] == frames
    return R[idx], t[idx], has


def predict_bap(
    camera: PlenopticCamera,
    poses: dict[int, Pose],
    board: Checkerboard,
    frame: NDArray,
    node: NDArray,
    k: NDArray,
    l: NDArray,
) -> FloatArray:
    """Model BAP features (u, v, ρ) of checkerboard nodes seen in frames through micro-lenses.

    Parameters
    ----------
    camera : PlenopticCamera
    poses : dict[int, Pose]
        ``cam_from_world`` per frame; every ``frame`` must be a key.
    board : Checkerboard
    frame, node, k, l : array_like of int, shape (N,)

    Returns
    -------
    ndarray, shape (N, 3)
        u, v (px) and signed ρ (px; NaN for pinhole micro-lenses).
    """
    frame = np.asarray(frame, dtype=np.int64)
    R, t, has = _pose_stack(poses, frame)
    if not np.all(has):
        missing = sorted(set(frame[~has].tolist()))
        raise DataError(f"no pose for frame(s) {missing}")
    p_w = board.node_points(np.asarray(node))
    p_cam = np.einsum("nij,nj->ni", R, p_w) + t
    return project_bap(camera, p_cam, k, l)


@dataclass(frozen=True, eq=False)
class Residuals:
    """Residuals ``observed − model`` of the evaluated observations.

    Attributes
    ----------
    bap_index : ndarray, shape (N,)
        Row of each evaluated feature in ``observations.bap``.
    frame, lens_type : ndarray, shape (N,)
        Frame and micro-lens type (−1 for pinholes) of each evaluated feature.
    uv : ndarray, shape (N, 2), px
    rho : ndarray, shape (N,), px (NaN when the camera has no micro-lens types)
    mic_uv : ndarray, shape (M, 2), px
    mic_type : ndarray, shape (M,)
    skipped_no_pose : dict[int, int]
        Frame -> number of linked features skipped because the frame has no pose.
    skipped_unlinked : int
        Features with ``node < 0``.
    """

    bap_index: IntArray
    frame: IntArray
    lens_type: IntArray
    uv: FloatArray
    rho: FloatArray
    mic_uv: FloatArray
    mic_type: IntArray
    skipped_no_pose: dict[int, int] = field(default_factory=dict)
    skipped_unlinked: int = 0

    def subset(self, keep_bap: NDArray[np.bool_], keep_mic: NDArray[np.bool_]) -> Residuals:
        """The residuals of the kept features and centres (skipped counts unchanged)."""
        kb, km = np.asarray(keep_bap, dtype=bool), np.asarray(keep_mic, dtype=bool)
        return Residuals(self.bap_index[kb], self.frame[kb], self.lens_type[kb], self.uv[kb], self.rho[kb],
                         self.mic_uv[km], self.mic_type[km], dict(self.skipped_no_pose), self.skipped_unlinked)


def compute_residuals(
    camera: PlenopticCamera, poses: dict[int, Pose], board: Checkerboard, observations: Observations
) -> Residuals:
    """Residuals of every linked BAP feature with a pose and of every micro-image centre.

    Raises
    ------
    DataError
        A feature names a node that is not on the board, or a micro-lens outside the lattice.
    """
    bap, mic = observations.bap, observations.mic
    lattice = camera.mla.lattice
    linked = bap.node >= 0
    if np.any(bap.node[linked] >= board.n_nodes):
        bad = int(bap.node[linked].max())
        raise DataError(
            f"observations use node {bad} but the {board.columns}x{board.rows} board has {board.n_nodes} nodes"
        )
    for name, kk, ll in (("BAP feature", bap.k, bap.l), ("micro-image centre", mic.k, mic.l)):
        inside = lattice.contains(kk, ll)
        if not np.all(inside):
            i = int(np.flatnonzero(~inside)[0])
            raise DataError(
                f"{name} at micro-lens ({kk[i]}, {ll[i]}) lies outside the {lattice.width}x{lattice.height} lattice"
            )
    _, _, has = _pose_stack(poses, bap.frame.astype(np.int64))
    use = linked & has
    no_pose = linked & ~has
    frames_np, counts = np.unique(bap.frame[no_pose], return_counts=True)
    idx = np.flatnonzero(use)
    f, node, k, l = bap.frame[idx], bap.node[idx], bap.k[idx], bap.l[idx]
    model = predict_bap(camera, poses, board, f, node, k, l) if idx.size else np.zeros((0, 3))
    uv = np.stack([bap.u[idx], bap.v[idx]], axis=1) - model[:, :2]
    rho = bap.rho[idx] - model[:, 2]
    mic_model = micro_image_centres(camera, mic.k, mic.l) if len(mic) else np.zeros((0, 2))
    mic_uv = np.stack([mic.u, mic.v], axis=1) - mic_model
    types = camera.mla.types
    return Residuals(
        bap_index=idx.astype(np.int64),
        frame=f.astype(np.int64),
        lens_type=types.type_of(k, l).astype(np.int64),
        uv=uv,
        rho=rho,
        mic_uv=mic_uv,
        mic_type=types.type_of(mic.k, mic.l).astype(np.int64),
        skipped_no_pose={int(a): int(b) for a, b in zip(frames_np, counts, strict=True)},
        skipped_unlinked=int(np.count_nonzero(~linked)),
    )


@dataclass(frozen=True)
class RmseSummary:
    """RMSEs of one group of observations (module docstring for the definitions).

    ``rho_px``/``bap_px`` are None without ρ (pinhole micro-lenses); an RMSE over zero
    observations is None.
    """

    n_bap: int
    n_mic: int
    uv_px: float | None
    rho_px: float | None
    bap_px: float | None
    mic_px: float | None
    total_px: float | None
    sum_squared_residuals: float

    def to_json(self) -> dict[str, Any]:
        return {
            "n_bap": self.n_bap,
            "n_mic": self.n_mic,
            "rmse": {
                "uv_px": self.uv_px,
                "rho_px": self.rho_px,
                "bap_px": self.bap_px,
                "mic_px": self.mic_px,
                "total_px": self.total_px,
            },
            "sum_squared_residuals": self.sum_squared_residuals,
        }


def _sqrt_ratio(num: float, den: int) -> float | None:
    return float(np.sqrt(num / den)) if den > 0 else None


def _summary(s_uv: float, s_rho: float, s_mic: float, n: int, m: int, has_rho: bool, n_rho: int | None = None) -> RmseSummary:
    """RMSEs of ``n`` features and ``m`` centres; ρ's over ``n_rho`` of the features (default all:
    single views have none)."""
    s_rho_eff = s_rho if has_rho else 0.0
    return RmseSummary(
        n_bap=n,
        n_mic=m,
        uv_px=_sqrt_ratio(s_uv, n),
        rho_px=_sqrt_ratio(s_rho, n if n_rho is None else n_rho) if has_rho else None,
        bap_px=_sqrt_ratio(s_uv + s_rho, n) if has_rho else None,
        mic_px=_sqrt_ratio(s_mic, m),
        total_px=_sqrt_ratio(s_uv + s_rho_eff + s_mic, m + 2 * n),
        sum_squared_residuals=float(s_uv + s_rho_eff + s_mic),
    )


def _grouped(keys: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray, IntArray]:
    """Unique keys, per-key sums of ``values`` and per-key counts (vectorised)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    sums = np.bincount(inv, weights=values, minlength=uniq.size).astype(np.float64)
    return uniq, sums, np.bincount(inv, minlength=uniq.size).astype(np.int64)


@dataclass(frozen=True)
class Rejection:
    """The observations left out of the headline RMSEs, and why.

    Attributes
    ----------
    rule : str
        How they were chosen (one line).
    probability : float or None
        The χ² rule's p (None: nothing rejected by rule).
    sigma_px, threshold_sigma : dict
        σ̂ per term and the thresholds on ‖e‖/σ̂ (:class:`~plenocal.evaluate.outliers.OutlierSplit`).
    counts : dict
        ``bap`` (= ``uv`` ∪ ``rho``), ``uv``, ``rho``, ``mic``: as calibration counts them.
    per_frame : dict[int, int]
        Rejected features per frame (frames with none are left out).
    features : list of dict
        One entry per rejected feature: frame, node, k, l, u, v (px), e_u, e_v, e_rho (px), the
        normalised norms s_uv, s_rho and the reason.
    all_observations : RmseSummary
        RMSEs over kept *and* rejected observations (what an unfiltered evaluation would say).
    suspended : str
        Why the rule was not applied (empty when it was).
    sigma_px_per_frame : dict
        frame → σ̂ per term, when features were judged frame by frame.
    """

    rule: str
    probability: float | None
    sigma_px: dict[str, float]
    threshold_sigma: dict[str, float]
    counts: dict[str, int]
    per_frame: dict[int, int]
    features: list[dict[str, Any]]
    all_observations: RmseSummary
    suspended: str = ""
    sigma_px_per_frame: dict[int, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "reject_probability": self.probability,
            "sigma_px": dict(self.sigma_px),
            **({"sigma_px_per_frame": {str(k): v for k, v in sorted(self.sigma_px_per_frame.items())}}
               if self.sigma_px_per_frame else {}),
            "threshold_sigma": dict(self.threshold_sigma),
            "counts": dict(self.counts),
            "per_frame": {str(k): v for k, v in sorted(self.per_frame.items())},
            "rmse_all_observations": self.all_observations.to_json()["rmse"],
            "suspended": self.suspended or None,
            "features": list(self.features),
        }


@dataclass(frozen=True)
class EvaluationReport:
    """Global, per-frame and per-lens-type RMSEs of the kept observations, what was rejected, and
    what was skipped."""

    overall: RmseSummary
    per_frame: dict[int, RmseSummary]
    per_type: dict[int, RmseSummary]
    skipped_no_pose: dict[int, int]
    skipped_unlinked: int
    rejection: Rejection | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``rmse``, ``sum_squared_residuals``, ``n_bap``, ``n_mic`` (kept),
        ``per_frame`` (kept, with ``n_rejected``) and ``per_type`` (keys are strings),
        ``rejected`` (:class:`Rejection`, when a rule was applied), ``skipped``."""
        out = self.overall.to_json()
        rejected_per_frame = self.rejection.per_frame if self.rejection is not None else {}
        frames = sorted(set(self.per_frame) | set(rejected_per_frame))
        empty = _summary(0.0, 0.0, 0.0, 0, 0, self.overall.rho_px is not None)
        out["per_frame"] = {
            str(k): self.per_frame.get(k, empty).to_json() | {"n_rejected": int(rejected_per_frame.get(k, 0))}
            for k in frames
        }
        out["per_type"] = {str(k): v.to_json() for k, v in sorted(self.per_type.items())}
        if self.rejection is not None:
            out["rejected"] = self.rejection.to_json()
        out["skipped"] = {
            "features_without_pose": int(sum(self.skipped_no_pose.values())),
            "frames_without_pose": {str(k): v for k, v in sorted(self.skipped_no_pose.items())},
            "unlinked_features": self.skipped_unlinked,
        }
        return out


def summarize(residuals: Residuals) -> EvaluationReport:
    """RMSEs of residuals: global, per frame (BAP only) and per micro-lens type (BAP and MIC)."""
    r = residuals
    e_uv = np.sum(r.uv**2, axis=1)
    # ρ is NaN for every feature of a camera without micro-lens types, and for single views
    # (a node fitted in one micro-image) of any camera: their ρ RMSE is over the others.
    finite = np.isfinite(r.rho)
    has_rho = bool(r.rho.size == 0 or finite.any())
    e_rho = np.where(finite, r.rho, 0.0) ** 2
    e_mic = np.sum(r.mic_uv**2, axis=1)
    overall = _summary(float(e_uv.sum()), float(e_rho.sum()), float(e_mic.sum()), e_uv.size, e_mic.size, has_rho,
                       int(finite.sum()))
    per_frame = {}
    frames, s_uv, n = _grouped(r.frame, e_uv)
    _, s_rho, _ = _grouped(r.frame, e_rho)
    _, n_rho, _ = _grouped(r.frame, finite.astype(np.float64))
    for i, f in enumerate(frames):
        per_frame[int(f)] = _summary(float(s_uv[i]), float(s_rho[i]), 0.0, int(n[i]), 0, has_rho, int(n_rho[i]))
    per_type = {}
    all_types = np.union1d(r.lens_type, r.mic_type)
    for t in all_types:
        b = r.lens_type == t
        m = r.mic_type == t
        per_type[int(t)] = _summary(
            float(e_uv[b].sum()), float(e_rho[b].sum()), float(e_mic[m].sum()), int(b.sum()), int(m.sum()), has_rho,
            int(finite[b].sum())
        )
    return EvaluationReport(overall, per_frame, per_type, dict(r.skipped_no_pose), r.skipped_unlinked)


def rejected_features(residuals: Residuals, split: OutlierSplit, observations: Observations) -> list[dict[str, Any]]:
    """One JSON-ready entry per feature the split rejects (see :class:`Rejection`)."""
    r, bap = residuals, observations.bap
    out = []
    for i in np.flatnonzero(~split.keep_bap):
        j = int(r.bap_index[i])
        rho = float(r.rho[i]) if np.isfinite(r.rho[i]) else None
        out.append({
            "frame": int(r.frame[i]), "node": int(bap.node[j]), "k": int(bap.k[j]), "l": int(bap.l[j]),
            "u": float(bap.u[j]), "v": float(bap.v[j]), "e_u": float(r.uv[i, 0]), "e_v": float(r.uv[i, 1]),
            "e_rho": rho, "s_uv": float(split.normalised["uv"][i]),
            "s_rho": float(split.normalised["rho"][i]) if "rho" in split.normalised else None,
            "reason": str(split.reason[i]),
        })
    return out


def summarize_split(residuals: Residuals, split: OutlierSplit, observations: Observations, *, rule: str = RULE) -> EvaluationReport:
    """RMSEs of the observations a split keeps, with its :class:`Rejection` (counts, list, all-observation RMSEs)."""
    kept = summarize(residuals.subset(split.keep_bap, split.keep_mic))
    everything = summarize(residuals).overall
    frames, counts = np.unique(residuals.frame[~split.keep_bap], return_counts=True)
    rejection = Rejection(
        rule=rule, probability=split.probability, sigma_px=dict(split.sigma_px),
        threshold_sigma=dict(split.threshold_sigma), counts=split.counts(),
        per_frame={int(f): int(c) for f, c in zip(frames, counts, strict=True)},
        features=rejected_features(residuals, split, observations), all_observations=everything,
        suspended=split.suspended, sigma_px_per_frame=dict(split.sigma_px_per_frame),
    )
    return dataclasses.replace(kept, rejection=rejection)


def evaluate_observations(
    camera: PlenopticCamera,
    poses: dict[int, Pose],
    board: Checkerboard,
    observations: Observations,
    *,
    reject_probability: float | None = DEFAULT_REJECT_PROBABILITY,
) -> EvaluationReport:
    """Reprojection RMSEs of a camera and poses on the observations calibration's rule keeps
    (reference §9.1; rule: :mod:`plenocal.evaluate.outliers`).

    Parameters
    ----------
    camera : PlenopticCamera
    poses : dict[int, Pose]
        ``cam_from_world`` per frame.
    board : Checkerboard
    observations : Observations
    reject_probability : float or None
        The rule's p (calibration's ``reject_probability``); None keeps every observation.

    Returns
    -------
    EvaluationReport
        RMSEs of the kept observations; ``rejection`` says what was left out.
    """
    res = compute_residuals(camera, poses, board, observations)
    return summarize_split(res, split_outliers(res, probability=reject_probability), observations)


__all__ = [
    "EvaluationReport",
    "Rejection",
    "Residuals",
    "RmseSummary",
    "compute_residuals",
    "evaluate_observations",
    "predict_bap",
    "rejected_features",
    "summarize",
    "summarize_split",
]
