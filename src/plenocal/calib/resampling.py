"""Frame-resampling uncertainty: the leave-one-frame-out jackknife of the calibration.

The Jacobian σ (:func:`plenocal.calib.solver.covariance`) says how well the data determine each
parameter *if the model is right and the errors are the residuals' noise*. On real data model
mismatch decides where a parameter lands along Θ's valleys (on the reference's real R12-A
observations F moves from 31 to 88 mm with the modelling choices while the Jacobian σ says
0.05–0.2 mm; DESIGN.md §5). Re-solving without each frame in turn sees that: a parameter that a
single frame's mismatch can move is not determined, whatever its Jacobian σ.

Jackknife (Efron & Stein): with θ̂₍ᵢ₎ the estimate without frame i of n,
σ_jack² = (n − 1)/n · Σᵢ (θ̂₍ᵢ₎ − θ̄)². Each re-solve starts from the full solution (warm start:
it moves only by what the frame pulled) with the same noise levels, loss and kept observations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.calib.parameters import ParameterLayout, derived_values
from plenocal.calib.residuals import Residuals
from plenocal.calib.solver import levenberg_marquardt

FloatArray = NDArray[np.float64]

MIN_FRAMES = 3
"""Fewer frames: no jackknife (each re-solve would lose half the data or more)."""
DISAGREEMENT_FACTOR = 3.0
"""The Jacobian σ and the frame-resampling σ of a parameter "disagree" beyond this ratio."""


@dataclass(frozen=True)
class FrameResampling:
    """Leave-one-frame-out estimates of the intrinsics.

    Attributes
    ----------
    frames : tuple of int
        The frame left out of each re-solve.
    estimates : ndarray, shape (n_frames, n_intrinsics)
        Intrinsics of each re-solve (NaN where it did not converge).
    std : ndarray, shape (n_intrinsics,)
        Jackknife σ of each intrinsic (0 for frozen ones).
    derived_std : dict
        Jackknife σ of the derived quantities (``sensor_distance_mm``, ``lambda``).
    converged : ndarray of bool, shape (n_frames,)
    wall_time_s : float
    """

    frames: tuple[int, ...]
    estimates: FloatArray
    std: FloatArray
    derived_std: dict[str, float]
    converged: NDArray[np.bool_]
    wall_time_s: float


def _without_frame(res: Residuals, x: FloatArray, active: FloatArray, i: int) -> tuple[Residuals, FloatArray, FloatArray]:
    """The problem without the i-th frame of the layout: residuals, start vector, active rows."""
    lay = res.layout
    f = lay.frames[i]
    keep = res.bap.frame != f
    lay_f = ParameterLayout(lay.template, tuple(fr for fr in lay.frames if fr != f), two_pitches=lay.two_pitches,
                            frozen=lay.frozen)
    res_f = Residuals(lay_f, res.bap.select(keep), res.mic, res.board, use_rho=res.use_rho,
                      pupil_vignetting=res.pupil_vignetting)
    n_int = lay.n_intrinsics
    poses = x[n_int:].reshape(-1, 6)
    x_f = np.concatenate([x[:n_int], np.delete(poses, i, axis=0).reshape(-1)])
    # Residual rows are [u | v | (ρ) | mic_u | mic_v]; res.bap is already frame-sorted, so the kept
    # features keep their order in res_f (its own sort is stable).
    sl = res.term_slices()
    parts = [active[sl[n]][keep] for n in ("u", "v", "rho") if n in sl]
    active_f = np.concatenate([*parts, active[sl["mic_u"]], active[sl["mic_v"]]])
    return res_f, x_f, active_f


def frame_jackknife(
    res: Residuals,
    x: FloatArray,
    *,
    sigma: dict[str, float],
    active: FloatArray,
    ftol: float = 1e-12,
    mu0: float | None = None,
    term_weights: dict[str, float] | None = None,
) -> FrameResampling | None:
    """Leave-one-frame-out re-solves of the final (plain least-squares) stage, warm-started.

    Parameters
    ----------
    res : Residuals
        The full problem (its layout, observations, board).
    x : ndarray, shape (layout.size,)
        The full solution.
    sigma : dict
        Noise levels of the final stage (held fixed).
    term_weights : dict, optional
        The final stage's term weights (:func:`plenocal.calib.solver.levenberg_marquardt`).
    active : ndarray, shape (res.n_rows,)
        Rows kept by the full calibration (0/1).

    Returns
    -------
    FrameResampling, or None with fewer than :data:`MIN_FRAMES` frames.
    """
    import time

    lay = res.layout
    n = len(lay.frames)
    if n < MIN_FRAMES:
        return None
    t0 = time.perf_counter()
    n_int = lay.n_intrinsics
    est = np.full((n, n_int), np.nan)
    ok = np.zeros(n, dtype=bool)
    derived = {name: np.full(n, np.nan) for name in derived_values(lay, x)}
    for i in range(n):
        res_f, x_f, act_f = _without_frame(res, x, active, i)
        if res_f.n_bap == 0:
            continue
        xi, rep = levenberg_marquardt(res_f, x_f, sigma=sigma, loss="linear", active=act_f, ftol=ftol, mu0=mu0,
                                      term_weights=term_weights)
        ok[i] = rep.converged
        est[i] = xi[:n_int]
        for name, (val, _g) in derived_values(res_f.layout, xi).items():
            derived[name][i] = val
    use = ok & np.all(np.isfinite(est), axis=1)
    m = int(use.sum())
    if m < MIN_FRAMES:
        std = np.full(n_int, np.nan)
        dstd = {k: float("nan") for k in derived}
    else:
        e = est[use]
        std = np.sqrt((m - 1) / m * np.sum((e - e.mean(axis=0)) ** 2, axis=0))
        dstd = {k: float(np.sqrt((m - 1) / m * np.sum((v[use] - v[use].mean()) ** 2))) for k, v in derived.items()}
    std[~lay.free_mask[:n_int]] = 0.0
    return FrameResampling(tuple(lay.frames), est, std, dstd, ok, time.perf_counter() - t0)
