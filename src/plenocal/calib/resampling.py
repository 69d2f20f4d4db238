"""Frame-resampling uncertainty: the leave-one-frame-out jackknife of the calibration.

The Jacobian σ (:func:`plenocal.calib.solver.covariance`) says how well the data determine each
parameter *if the model is right and the errors are the residuals' noise*. On real data model
mismatch decides where a parameter lands along Θ's valleys (on the reference's real R12-A
observations F moves from 31 to 88 mm with the modelling choices while the Jacobian σ says
0.05–0.2 mm; DESIGN.md §5). Re-solving without each frame in turn sees that: a parameter that a
single frame's mismatch can move is not determined, whatever its Jacobian σ.

Jackknife (Efron & Stein): with θ̂₍ᵢ₎ the estimate without frame i of n,
σ_jack² = (n − 1)/n · Σᵢ (θ̂₍ᵢ₎ − θ̄)². Each re-solve starts from the full solution (warm start:
it moves only by what the frame pulled) with the same noise levels, loss and kept observations,
and is converged as tightly as the full solve. The re-solves are independent: they run in parallel
worker processes (fork start) where the platform has them, each single-threaded, and the result
does not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from plenocal.calib.parameters import ParameterLayout, derived_values
from plenocal.calib.priors import PriorTerms
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
    iterations : ndarray of int, shape (n_frames,)
        Solver iterations of each re-solve (0 where skipped).
    workers : int
        Processes the re-solves ran in (1: in this process).
    """

    frames: tuple[int, ...]
    estimates: FloatArray
    std: FloatArray
    derived_std: dict[str, float]
    converged: NDArray[np.bool_]
    wall_time_s: float
    iterations: NDArray[np.int64] | None = None
    workers: int = 1


def without_frame(res: Residuals, x: FloatArray, active: FloatArray, i: int) -> tuple[Residuals, FloatArray, FloatArray]:
    """The problem without the i-th frame of the layout: residuals, start vector, active rows."""
    lay = res.layout
    f = lay.frames[i]
    keep = res.bap.frame != f
    lay_f = ParameterLayout(lay.template, tuple(fr for fr in lay.frames if fr != f), two_pitches=lay.two_pitches,
                            frozen=lay.frozen, exit_pupil=lay.exit_pupil,
                            depth_distortion=lay.depth_distortion)
    res_f = Residuals(lay_f, res.bap.select(keep), res.mic, res.board, use_rho=res.use_rho,
                      pupil_vignetting=res.pupil_vignetting, pupil_radii=res.pupil_radii)
    n_int = lay.n_intrinsics
    poses = x[n_int:].reshape(-1, 6)
    x_f = np.concatenate([x[:n_int], np.delete(poses, i, axis=0).reshape(-1)])
    # Residual rows are [u | v | (ρ) | mic_u | mic_v]; res.bap is already frame-sorted, so the kept
    # features keep their order in res_f (its own sort is stable).
    sl = res.term_slices()
    parts = [active[sl[n]][keep] for n in ("u", "v", "rho") if n in sl]
    active_f = np.concatenate([*parts, active[sl["mic_u"]], active[sl["mic_v"]]])
    return res_f, x_f, active_f


@dataclass(frozen=True)
class _Job:
    """One jackknife's inputs, shared by its re-solves (inherited by forked workers, not pickled)."""

    res: Residuals
    x: FloatArray
    active: FloatArray
    sigma: dict[str, float]
    ftol: float
    mu0: float | None
    term_weights: dict[str, float] | None = None
    priors: PriorTerms | None = None


_WORKER_JOB: _Job | None = None


def _set_worker_job(job: _Job) -> None:
    """Worker initialiser: the job, and the default signal handlers — a forked worker inherits
    its parent's (the CLI's SIGTERM raises), but it should end quietly when the pool ends it, and
    leave Ctrl-C to the parent."""
    global _WORKER_JOB
    _WORKER_JOB = job
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _resolve_without(job: _Job, i: int) -> tuple[FloatArray | None, bool, int]:
    """Intrinsics re-estimated without the i-th frame (None if it leaves no BAP feature), whether
    the solve converged, and its iterations."""
    res_f, x_f, act_f = without_frame(job.res, job.x, job.active, i)
    if res_f.n_bap == 0:
        return None, False, 0
    with threadpool_limits(limits=1, user_api="blas"):
        xi, rep = levenberg_marquardt(res_f, x_f, sigma=job.sigma, loss="linear", active=act_f, ftol=job.ftol,
                                      mu0=job.mu0, term_weights=job.term_weights,
                                      priors=job.priors)
    return xi[: job.res.layout.n_intrinsics], rep.converged, rep.iterations


def _worker_resolve(i: int) -> tuple[FloatArray | None, bool, int]:
    assert _WORKER_JOB is not None
    return _resolve_without(_WORKER_JOB, i)


def available_workers() -> int:
    """CPUs this process may run on (``os.sched_getaffinity`` where it exists)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _run_resolves(job: _Job, n: int, workers: int) -> tuple[list[Any], int]:
    """The n re-solves, in a pool of ``workers`` forked processes (in this process for 1, or where
    fork is unavailable); results in frame order."""
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(processes=workers, initializer=_set_worker_job, initargs=(job,)) as pool:
            results = pool.map(_worker_resolve, range(n), chunksize=1)
            pool.close()  # let the workers end by themselves rather than be terminated on exit
            pool.join()
        return results, workers
    return [_resolve_without(job, i) for i in range(n)], 1


def frame_jackknife(
    res: Residuals,
    x: FloatArray,
    *,
    sigma: dict[str, float],
    active: FloatArray,
    ftol: float = 1e-12,
    mu0: float | None = None,
    term_weights: dict[str, float] | None = None,
    workers: int | None = None,
    priors: PriorTerms | None = None,
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
    priors : PriorTerms, optional
        The final stage's priors (each re-solve keeps them).
    term_weights : dict, optional
        The final stage's term weights (:func:`plenocal.calib.solver.levenberg_marquardt`).
    active : ndarray, shape (res.n_rows,)
        Rows kept by the full calibration (0/1).
    ftol : float
        Convergence of each re-solve (:func:`~plenocal.calib.solver.levenberg_marquardt`).
    mu0 : float, optional
        Initial damping of each re-solve.
    workers : int, optional
        Worker processes (default: the CPUs available, at most one per frame; 1 runs the re-solves
        in this process). The estimates are identical for any number of workers.

    Returns
    -------
    FrameResampling, or None with fewer than :data:`MIN_FRAMES` frames.
    """
    lay = res.layout
    n = len(lay.frames)
    if n < MIN_FRAMES:
        return None
    t0 = time.perf_counter()
    n_int = lay.n_intrinsics
    est = np.full((n, n_int), np.nan)
    ok = np.zeros(n, dtype=bool)
    iterations = np.zeros(n, dtype=np.int64)
    derived = {name: np.full(n, np.nan) for name in derived_values(lay, x)}
    job = _Job(res, np.asarray(x, dtype=np.float64), np.asarray(active, dtype=np.float64), dict(sigma), ftol, mu0,
               None if term_weights is None else dict(term_weights), priors)
    n_workers = min(available_workers() if workers is None else max(1, int(workers)), n)
    results, used = _run_resolves(job, n, n_workers)
    for i, (xi, converged, its) in enumerate(results):
        if xi is None:
            continue
        est[i], ok[i], iterations[i] = xi, converged, its
        x_i = np.array(x, dtype=np.float64, copy=True)
        x_i[:n_int] = xi
        for name, (val, _g) in derived_values(lay, x_i).items():
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
    return FrameResampling(tuple(lay.frames), est, std, dstd, ok, time.perf_counter() - t0, iterations, used)
