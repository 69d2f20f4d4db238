"""Levenberg–Marquardt on the block-structured normal equations, with an optional robust loss.

The unknowns are the scaled free variables of a :class:`~plenocal.calib.parameters.ParameterLayout`
(intrinsics + one pose per frame). The normal matrix JᵀWJ is assembled from the dense intrinsic
columns and the per-frame 6-column pose blocks (:class:`~plenocal.calib.residuals.JacobianBlocks`),
so its size is (n_free_intrinsics + 6·n_frames)² whatever the number of observations.

Robust loss (iteratively reweighted Gauss–Newton): residuals are grouped into *units* — the (u, v)
pair of a BAP feature, its ρ, the (u, v) pair of a MIC — each normalised by the noise level σ_t of
its term; the cost is ``½ Σ φ(s²)`` with ``s = ‖e‖/σ_t`` and φ the loss (``linear``: φ(z) = z;
``huber``: z for z ≤ c², 2c√z − c² beyond).

Convergence is not an iteration count: the solver stops when the Gauss–Newton model predicts that
one more (undamped) step lowers the cost by less than ``ftol`` relative, when the gradient is zero
to numerical precision, or when no step can lower the cost any more (reported as such).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import LinAlgError, cho_factor, cho_solve

from plenocal.calib.jacobian import bap_jacobian, block_views, jacobian_block, mic_jacobian
from plenocal.calib.priors import PriorTerms
from plenocal.calib.residuals import JacobianBlocks, Residuals
from plenocal.errors import ModelError

FloatArray = NDArray[np.float64]

LOSSES = ("linear", "huber")


@dataclass
class SolverReport:
    """Convergence diagnostics of one solve."""

    converged: bool
    termination: str
    iterations: int
    cost_history: list[float] = field(default_factory=list)
    gradient_norm: float = float("nan")
    predicted_relative_decrease: float = float("nan")
    n_evaluations: int = 0
    system_time_s: float = 0.0
    """Time in the Jacobian and the normal equations (fused for the analytic Jacobian)."""
    residual_time_s: float = 0.0
    damping: float = 1e-4
    """Damping μ (relative to diag(JᵀWJ)) at the end: reusable as the next stage's ``mu0``."""
    quasi_newton_steps: int = 0
    """Accepted steps of the quasi-Newton model (the others are Gauss–Newton / damped)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "converged": self.converged,
            "termination": self.termination,
            "iterations": self.iterations,
            "cost_history": [float(c) for c in self.cost_history],
            "gradient_norm": float(self.gradient_norm),
            "predicted_relative_decrease": float(self.predicted_relative_decrease),
            "n_evaluations": self.n_evaluations,
            "quasi_newton_steps": self.quasi_newton_steps,
        }


class Units:
    """Grouping of the residual rows into units (a feature's (u, v), its ρ, a MIC's (u, v)).

    Parameters
    ----------
    residuals : Residuals
    sigma : dict
        Noise level (px) of each term: ``uv``, ``rho``, ``mic`` (the robust loss's scale).
    weights : dict, optional
        Weight of each term's squared residuals in the cost (default 1/σ_t²: maximum likelihood;
        1 for the paper's unweighted Θ, the robust loss still scaled by σ_t).
    """

    def __init__(self, residuals: Residuals, sigma: dict[str, float], weights: dict[str, float] | None = None) -> None:
        self.res = residuals
        self.sigma = dict(sigma)
        self.weight = {k: 1.0 / v**2 for k, v in self.sigma.items()} if weights is None else dict(weights)
        sl = residuals.term_slices()
        self.slices = sl

    def norms(self, r: FloatArray) -> dict[str, FloatArray]:
        """Normalised unit residual norms s per term."""
        sl = self.slices
        out = {"uv": np.hypot(r[sl["u"]], r[sl["v"]]) / self.sigma["uv"]}
        if "rho" in sl:
            out["rho"] = np.abs(r[sl["rho"]]) / self.sigma["rho"]
        out["mic"] = np.hypot(r[sl["mic_u"]], r[sl["mic_v"]]) / self.sigma["mic"]
        return out

    def cost_and_weights(
        self, r: FloatArray, loss: str, c: float, active: FloatArray
    ) -> tuple[float, FloatArray, dict[str, FloatArray]]:
        """Robust cost ½Σφ(s²) over active rows and IRLS row weights φ'(s²)/σ_t².

        ``active`` is a 0/1 row mask (rejected observations are 0).
        """
        sl = self.slices
        s = self.norms(r)
        w = np.empty_like(r)
        cost = 0.0
        unit_w: dict[str, FloatArray] = {}
        rows = {"uv": ("u", "v"), "rho": ("rho",), "mic": ("mic_u", "mic_v")}
        for term, sv in s.items():
            act = active[sl[rows[term][0]]]
            z = sv * sv
            if loss == "huber":
                big = z > c * c
                phi = np.where(big, 2.0 * c * np.sqrt(z) - c * c, z)
                dphi = np.where(big, c / np.maximum(sv, 1e-300), 1.0)
            else:
                phi, dphi = z, np.ones_like(z)
            wt = self.weight[term]
            cost += 0.5 * wt * self.sigma[term] ** 2 * float(np.sum(act * phi))
            uw = act * dphi
            unit_w[term] = uw
            for name in rows[term]:
                w[sl[name]] = uw * wt
        return cost, w, unit_w


@dataclass
class NormalBlocks:
    """JᵀWJ and JᵀWr by blocks: intrinsics, each frame's pose, and their coupling.

    Attributes
    ----------
    H_ii : ndarray, shape (p, p)
    H_ip : ndarray, shape (p, n_frames, 6)
    H_pp : ndarray, shape (n_frames, 6, 6)
    g_i : ndarray, shape (p,)
    g_p : ndarray, shape (n_frames, 6)
    """

    H_ii: FloatArray
    H_ip: FloatArray
    H_pp: FloatArray
    g_i: FloatArray
    g_p: FloatArray

    @classmethod
    def zeros(cls, p: int, n_frames: int) -> NormalBlocks:
        return cls(np.zeros((p, p)), np.zeros((p, n_frames, 6)), np.zeros((n_frames, 6, 6)), np.zeros(p),
                   np.zeros((n_frames, 6)))

    def add_frame_gram(self, f: int, G: FloatArray, gf: FloatArray) -> None:
        """Add the Gram matrix ``G`` = AᵀA (p + 6 square) and ``gf`` = Aᵀr of rows A = [intrinsics |
        frame f's pose]."""
        p = self.H_ii.shape[0]
        self.H_ii += G[:p, :p]
        self.H_ip[:, f, :] += G[:p, p:]
        self.H_pp[f] += G[p:, p:]
        self.g_i += gf[:p]
        self.g_p[f] += gf[p:]

    def assemble(self, pose_free: NDArray[np.bool_]) -> tuple[FloatArray, FloatArray, NDArray[np.int64]]:
        """(H, g, pose_cols) over the free variables: intrinsics first, then the free pose entries
        (``pose_cols``: indices into frame·6 + component)."""
        p = self.H_ii.shape[0]
        n_frames = pose_free.shape[0]
        pose_cols = np.flatnonzero(pose_free.reshape(-1))
        n = p + pose_cols.size
        H = np.zeros((n, n))
        H[:p, :p] = self.H_ii
        Hip = self.H_ip.reshape(p, 6 * n_frames)[:, pose_cols]
        H[:p, p:] = Hip
        H[p:, :p] = Hip.T
        full_pp = np.zeros((6 * n_frames, 6 * n_frames))  # block-diagonal pose part
        for f in range(n_frames):
            full_pp[6 * f : 6 * f + 6, 6 * f : 6 * f + 6] = self.H_pp[f]
        H[p:, p:] = full_pp[np.ix_(pose_cols, pose_cols)]
        g = np.concatenate([self.g_i, self.g_p.reshape(-1)[pose_cols]])
        return H, g, pose_cols


def normal_equations(
    residuals: Residuals, J: JacobianBlocks, r: FloatArray, w: FloatArray
) -> tuple[FloatArray, FloatArray, NDArray[np.int64]]:
    """H = JᵀWJ and g = JᵀWr over the free variables, from Jacobian blocks.

    The intrinsic block is one symmetric product over all rows (the MIC rows over the columns that
    move the micro-image centres only); the pose blocks and their coupling with the intrinsics are
    summed per frame and BAP term over contiguous row ranges (BAP rows are sorted by frame within
    each term).

    Parameters
    ----------
    residuals : Residuals
    J : JacobianBlocks
    r : ndarray, shape (n_rows,)
    w : ndarray, shape (n_rows,)
        Row weights, ≥ 0.

    Returns
    -------
    H : ndarray, shape (n, n)
    g : ndarray, shape (n,)
    pose_cols : ndarray of int
        Indices (into frame·6 + component) of the free pose columns, in the order used.
    """
    JiT = J.intrinsics.T
    p_i = JiT.shape[0]
    n_frames = J.pose_free.shape[0]
    nt, N = residuals.n_terms_bap, residuals.n_bap
    nb = nt * N
    sw = np.sqrt(w)
    swr = sw * r
    blocks = NormalBlocks.zeros(p_i, n_frames)
    # √W-scaled columns: H_ii = B·Bᵀ (a symmetric rank-k product).
    B = JiT[:, :nb] * sw[:nb]
    blocks.H_ii += B @ B.T
    blocks.g_i += B @ swr[:nb]
    if JiT.shape[1] > nb:
        mc = np.arange(p_i) if J.mic_columns is None else J.mic_columns
        Bm = JiT[mc, nb:]
        Bm *= sw[nb:]
        blocks.H_ii[np.ix_(mc, mc)] += Bm @ Bm.T
        blocks.g_i[mc] += Bm @ swr[nb:]
    starts = residuals.frame_start
    for t in range(nt if N else 0):
        Pt = J.poses[t] * sw[t * N : (t + 1) * N, None]  # √W-scaled pose columns of term t, (N, 6)
        Bt = B[:, t * N : (t + 1) * N]
        rt = swr[t * N : (t + 1) * N]
        for f in range(n_frames):
            a, b = starts[f], starts[f + 1]
            if a == b:
                continue
            Pf = Pt[a:b]
            blocks.H_ip[:, f, :] += Bt[:, a:b] @ Pf
            blocks.H_pp[f] += Pf.T @ Pf
            blocks.g_p[f] += rt[a:b] @ Pf
    return blocks.assemble(J.pose_free)


MIC_CHUNK_ROWS = 8192
"""Micro-image centres per chunk of :func:`analytic_normal_equations` (a chunk's Jacobian stays in cache)."""


def analytic_normal_equations(
    residuals: Residuals, x: FloatArray, r: FloatArray, w: FloatArray
) -> tuple[FloatArray, FloatArray, NDArray[np.int64]]:
    """:func:`normal_equations` of the analytic Jacobian at ``x``, without forming the whole Jacobian.

    The Jacobian is computed one frame's BAP rows (all terms, [intrinsics | own pose]) and one chunk
    of micro-image centres at a time, each chunk's Gram matrix summed in a fixed order: the memory
    traffic of a ~20-column Jacobian of 10⁵ rows is what dominated the time. Same result as
    :func:`normal_equations` of :meth:`Residuals.jacobian` up to rounding.
    """
    st = residuals.analytic_state(x)
    p_i = st.columns.kind_a.size
    nt, N, M = residuals.n_terms_bap, residuals.n_bap, residuals.n_mic
    n_frames = st.pose_free.shape[0]
    sw = np.sqrt(w)
    swr = sw * r
    blocks = NormalBlocks.zeros(p_i, n_frames)
    starts = residuals.frame_start
    if N:
        assert st.points is not None
        buf = jacobian_block(nt * int(np.diff(starts).max()), p_i)
        for f in range(n_frames):
            a, b = int(starts[f]), int(starts[f + 1])
            if a == b:
                continue
            out_int, out_pose, A = block_views(buf[: nt * (b - a)], p_i)
            idx = (np.arange(nt)[:, None] * N + np.arange(a, b)[None, :]).reshape(-1)
            bap_jacobian(st.camera, st.points, residuals.bap_rows, nt, st.columns, st.pose_scale, out_int,
                         out_pose, start=a, stop=b, row_weight=sw[idx], vignetting=st.vignetting)
            blocks.add_frame_gram(f, A.T @ A, A.T @ swr[idx])
    if M:
        mc = st.mic_columns
        cols = st.columns.subset(mc)
        buf = np.empty((2 * min(M, MIC_CHUNK_ROWS), mc.size))
        H_m = np.zeros((mc.size, mc.size))
        g_m = np.zeros(mc.size)
        for a in range(0, M, MIC_CHUNK_ROWS):
            b = min(a + MIC_CHUNK_ROWS, M)
            A = buf[: 2 * (b - a)]
            idx = nt * N + np.concatenate([np.arange(a, b), M + np.arange(a, b)])
            mic_jacobian(st.camera, residuals.mic_offsets, cols, A, start=a, stop=b, row_weight=sw[idx])
            H_m += A.T @ A
            g_m += A.T @ swr[idx]
        blocks.H_ii[np.ix_(mc, mc)] += H_m
        blocks.g_i[mc] += g_m
    return blocks.assemble(st.pose_free)


def gauss_newton_system(
    residuals: Residuals, x: FloatArray, r: FloatArray, w: FloatArray, *, jacobian: str | None = None
) -> tuple[FloatArray, FloatArray, NDArray[np.int64]]:
    """(H, g, pose_cols) of the Gauss–Newton step at ``x``.

    ``jacobian`` (default: the residuals' :attr:`~Residuals.default_jacobian_method`):
    ``"analytic"`` uses :func:`analytic_normal_equations`, ``"fd"`` :func:`normal_equations` of the
    finite-difference Jacobian.
    """
    method = residuals.default_jacobian_method if jacobian is None else jacobian
    if method == "analytic":
        return analytic_normal_equations(residuals, x, r, w)
    return normal_equations(residuals, residuals.jacobian(x, method=method), r, w)


def secant_update(S: FloatArray, H: FloatArray, step: FloatArray, dg: FloatArray) -> FloatArray:
    """Structured secant update of the residual-curvature term S of the Hessian JᵀWJ + S.

    After a step s that changed the gradient by y, the new S satisfies (H + S)·s = y, H the
    Gauss–Newton matrix at the new point: the Dennis–Gay–Welsch update of NL2SOL (ACM TOMS 7,
    1981), with S first shrunk by min(1, |sᵀ(y − Hs)|/|sᵀSs|) so that an estimate from far away
    does not dominate. Skipped (S returned unchanged) when sᵀy ≤ 0.

    Parameters
    ----------
    S, H : ndarray, shape (n, n)
    step, dg : ndarray, shape (n,)
        s and y, in solver variables.

    Returns
    -------
    ndarray, shape (n, n)
    """
    sy = float(step @ dg)
    if not sy > 0.0:
        return S
    target = dg - H @ step  # what S·s should be
    sSs = float(step @ S @ step)
    if sSs != 0.0:
        S = S * min(1.0, abs(float(step @ target)) / abs(sSs))
    z = target - S @ step
    return S + (np.outer(z, dg) + np.outer(dg, z)) / sy - (float(z @ step) / sy**2) * np.outer(dg, dg)


def _solve_pd(A: FloatArray, b: FloatArray) -> FloatArray | None:
    """A⁻¹b by Cholesky, or None where A is not positive definite."""
    try:
        return cho_solve(cho_factor(A, lower=False, check_finite=False), b, check_finite=False)
    except LinAlgError:
        return None


def _solve_spd(A: FloatArray, b: FloatArray) -> FloatArray:
    try:
        return cho_solve(cho_factor(A, lower=False, check_finite=False), b, check_finite=False)
    except LinAlgError:
        return np.linalg.lstsq(A, b, rcond=None)[0]


def _active_rows(residuals: Residuals, active: FloatArray | None) -> FloatArray:
    """The 0/1 row mask the solver uses: ``active`` (default all rows) on the rows that hold an
    observation (:attr:`Residuals.observed_rows`: a single view's ρ row never does)."""
    observed = residuals.observed_rows
    return observed.copy() if active is None else np.asarray(active, dtype=np.float64) * observed


@dataclass
class _Trial:
    """A step tried by :func:`levenberg_marquardt`: the solver-variable step ``d``, the point it
    leads to, and there the residuals, the cost (inf off the physical domain) and the weights."""

    d: FloatArray
    x: FloatArray
    r: FloatArray
    cost: float
    w: FloatArray


def _normal_system(residuals: Residuals, x: FloatArray, r: FloatArray, w: FloatArray, *, jacobian: str | None,
                   priors: PriorTerms | None, report: SolverReport) -> tuple[FloatArray, FloatArray, NDArray[np.int64]]:
    """The Gauss–Newton system (JᵀWJ, JᵀWr, the free pose columns) at ``x`` with the priors' normal
    equations added; its time goes to ``report.system_time_s``."""
    t0 = time.perf_counter()
    H, g, pose_cols = gauss_newton_system(residuals, x, r, w, jacobian=jacobian)
    if priors:
        Hp, gp = priors.normal_equations(residuals.layout, x)
        H[: gp.size, : gp.size] += Hp
        g[: gp.size] += gp
    report.system_time_s += time.perf_counter() - t0
    return H, g, pose_cols


def _stopped(report: SolverReport, *, ftol: float, max_iterations: int) -> bool:
    """Whether the solve ends here (``report``'s termination set): the Gauss–Newton model predicts
    a relative decrease below ``ftol``, the gradient is zero, or the safety net is reached."""
    if report.predicted_relative_decrease < ftol:
        report.converged, report.termination = True, "predicted relative decrease < ftol"
    elif report.gradient_norm == 0.0:
        report.converged, report.termination = True, "gradient is zero"
    elif report.iterations >= max_iterations:
        report.termination = "maximum number of iterations reached (safety net)"
    else:
        return False
    return True


def _undamped_step(H: FloatArray, g: FloatArray, d_gn: FloatArray, pred_gn: float, S: FloatArray | None, cost: float, *,
                   trial: Callable[[FloatArray], _Trial], quasi_newton_first: bool, report: SolverReport) -> _Trial | None:
    """The first undamped step that lowers the cost by at least a quarter of what its model
    predicts, or None.

    Θ has long, narrow valleys (F–D, u0–tx, d–f_i) along which damped steps only creep. The
    Gauss–Newton step ``d_gn`` and the quasi-Newton step of JᵀWJ + S (where S is known and the sum
    positive definite) are tried, first the quasi-Newton one when ``quasi_newton_first`` (its model
    predicted the last decrease better). A quasi-Newton step that fails zeroes S in place: the
    secant estimate misled here, and starts again."""
    candidates = [(d_gn, pred_gn, False)]
    if S is not None and S.any():
        d_qn = _solve_pd(H + S, -g)
        if d_qn is not None:
            qn_step = (d_qn, float(-(g @ d_qn + 0.5 * d_qn @ (H + S) @ d_qn)), True)
            candidates.insert(0 if quasi_newton_first else 1, qn_step)
    for d, pred, augmented in candidates:
        t = trial(d)
        if np.isfinite(t.cost) and t.cost < cost - 0.25 * pred:
            report.quasi_newton_steps += int(augmented)
            return t
        if augmented:
            assert S is not None
            S[:] = 0.0
    return None


def _damped_step(H: FloatArray, g: FloatArray, diag: FloatArray, cost: float, mu: float, nu: float, *,
                 trial: Callable[[FloatArray], _Trial]) -> tuple[_Trial | None, float, float]:
    """Levenberg–Marquardt on JᵀWJ: (H + μD)δ = −g, μ raised by ν (doubling) until the cost falls
    (r = obs − pred and J = ∂r/∂z, so g = JᵀWr), then lowered by the gain ratio (Nielsen's rule).
    Returns (the step, or None when none lowers the cost or μ passes 1e20, μ, ν)."""
    while True:
        d = -_solve_spd(H + mu * np.diag(diag), g)
        t = trial(d)
        pred = float(-(g @ d + 0.5 * d @ H @ d))
        if np.isfinite(t.cost) and t.cost < cost:
            ratio = (cost - t.cost) / pred if pred > 0 else 0.0
            mu *= max(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3)
            return t, mu, 2.0
        if t.cost == cost:
            return None, mu, nu
        mu *= nu
        nu *= 2.0
        if mu > 1e20:
            return None, mu, nu


MAX_ITERATIONS = 500
"""The solver's safety net (:func:`levenberg_marquardt`'s ``max_iterations``): reaching it is
reported as not converged."""


def levenberg_marquardt(
    residuals: Residuals,
    x0: FloatArray,
    *,
    sigma: dict[str, float],
    loss: str = "linear",
    loss_scale: float = 2.0,
    active: FloatArray | None = None,
    ftol: float = 1e-13,
    max_iterations: int = MAX_ITERATIONS,
    mu0: float | None = None,
    term_weights: dict[str, float] | None = None,
    jacobian: str | None = None,
    quasi_newton: bool = True,
    priors: PriorTerms | None = None,
) -> tuple[FloatArray, SolverReport]:
    """Minimise ½Σφ(‖e‖²/σ_t²) over the layout's free variables.

    Levenberg–Marquardt on the Gauss–Newton matrix JᵀWJ, with undamped steps tried first and,
    by default, a structured quasi-Newton step: JᵀWJ omits Σ wᵢeᵢ∇²eᵢ, which on real data
    (residuals of model mismatch, not noise) flattens one of Θ's valleys to a tenth of its
    Gauss–Newton curvature; Gauss–Newton then converges linearly at ~0.9 per iteration (102
    iterations on the reference's R12-A observations). :func:`secant_update` estimates that term
    from the gradients the iterations compute anyway (Dennis, Gay & Welsch 1981; NL2SOL), and
    the same problem converges in 16. Convergence is judged on the Gauss–Newton model in both
    cases (``ftol``), so the stopping point does not depend on the option.

    Parameters
    ----------
    residuals : Residuals
    x0 : ndarray, shape (layout.size,)
        Start, full vector in natural units (frozen entries stay at these values).
    sigma : dict
        Noise level per term (``uv``, ``rho``, ``mic``), px.
    loss : {"linear", "huber"}
    loss_scale : float
        Huber threshold c in units of σ_t.
    active : ndarray, shape (n_rows,), optional
        0/1 row mask (rejected observations 0).
    ftol : float
        Stop when the Gauss–Newton model predicts a relative cost decrease below ``ftol`` for one
        more undamped step.
    max_iterations : int
        A safety net only; reaching it is reported as not converged.
    mu0 : float, optional
        Initial damping (relative to the diagonal of JᵀWJ); e.g. the final damping of a previous
        stage (``SolverReport.damping``). Default 1e-4.
    jacobian : {"analytic", "fd"}, optional
        Jacobian method (:meth:`Residuals.jacobian`); default the residuals' own (analytic).
    quasi_newton : bool
        Try the step of JᵀWJ + S, S the secant estimate of the residual curvature, before the
        Gauss–Newton step (False: Gauss–Newton / Levenberg–Marquardt only).
    term_weights : dict, optional
        Weight of each term's squared residuals (default 1/σ_t², see :class:`Units`).
    priors : PriorTerms, optional
        Gaussian priors on intrinsics, added to the cost (:mod:`plenocal.calib.priors`).

    Returns
    -------
    x : ndarray, shape (layout.size,)
    report : SolverReport
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    lay = residuals.layout
    units = Units(residuals, sigma, term_weights)
    act = _active_rows(residuals, active)
    free = lay.free_mask
    n_int = lay.n_intrinsics
    scale = lay.scale
    x = np.array(x0, dtype=np.float64, copy=True)
    rep = SolverReport(converged=False, termination="", iterations=0)

    def evaluate(xv: FloatArray) -> tuple[FloatArray, float, FloatArray]:
        t0 = time.perf_counter()
        try:
            rv = residuals.residuals(xv)
        except ModelError:  # a trial step left the physical domain (d <= 0, f <= 0, ...)
            rv = np.full(residuals.n_rows, np.nan)
        if not np.all(np.isfinite(rv)):
            rep.residual_time_s += time.perf_counter() - t0
            return rv, np.inf, np.zeros_like(rv)
        c, wv, _ = units.cost_and_weights(rv, loss, loss_scale, act)
        if priors:
            c += priors.cost(lay, xv)
        rep.n_evaluations += 1
        rep.residual_time_s += time.perf_counter() - t0
        return rv, c, wv

    r, cost, w = evaluate(x)
    rep.cost_history.append(cost)
    mu = None
    nu = 2.0
    free_int = np.flatnonzero(free[:n_int])
    S: FloatArray | None = None  # secant estimate of the residual-curvature term
    last: tuple[FloatArray, FloatArray] | None = None  # (step, gradient) of the last iteration
    prefer_qn = False  # which model predicted the last step's decrease better

    def take(d: FloatArray, pose_cols: NDArray[np.int64]) -> FloatArray:
        """x moved by the solver-variable step d (free intrinsics, then free pose entries)."""
        step = np.zeros(lay.size)
        step[free_int] = d[: free_int.size]
        step[n_int + pose_cols] = d[free_int.size :]
        x_new = x.copy()
        x_new[free] += (step * scale)[free]
        return x_new

    while True:
        H, g, pose_cols = _normal_system(residuals, x, r, w, jacobian=jacobian, priors=priors, report=rep)
        if quasi_newton:
            S = np.zeros_like(H) if S is None or last is None else secant_update(S, H, last[0], g - last[1])
        rep.gradient_norm = float(np.max(np.abs(g))) if g.size else 0.0
        diag = np.maximum(np.diag(H), 1e-12 * max(np.max(np.diag(H)), 1e-300))
        gn = _solve_spd(H + 1e-12 * np.diag(diag), g)
        pred_gn = 0.5 * float(g @ gn)
        rep.predicted_relative_decrease = pred_gn / max(cost, 1e-300)
        if _stopped(rep, ftol=ftol, max_iterations=max_iterations):
            break
        if mu is None:
            mu = 1e-4 if mu0 is None else mu0

        def trial(d: FloatArray, cols: NDArray[np.int64] = pose_cols) -> _Trial:
            x_new = take(d, cols)
            return _Trial(d, x_new, *evaluate(x_new))

        step = _undamped_step(H, g, -gn, pred_gn, S, cost, trial=trial, quasi_newton_first=prefer_qn, report=rep)
        if step is not None:
            mu, nu = max(mu / 10.0, 1e-12), 2.0
        else:
            step, mu, nu = _damped_step(H, g, diag, cost, mu, nu, trial=trial)
        rep.iterations += 1
        if step is None:
            # No step lowers the cost: the gradient is zero to numerical precision.
            rep.converged = True
            rep.termination = "no step lowers the cost (gradient zero to numerical precision)"
            break
        if S is not None:
            # NL2SOL's model switch: next time, first the model that predicted this decrease better.
            decrease = cost - step.cost
            gauss_newton = -(g @ step.d + 0.5 * step.d @ H @ step.d)
            prefer_qn = abs(gauss_newton - 0.5 * step.d @ S @ step.d - decrease) < abs(gauss_newton - decrease)
        last = (step.d, g)
        x, r, cost, w = step.x, step.r, step.cost, step.w
        rep.cost_history.append(cost)
    if mu is not None:
        rep.damping = float(mu)
    return x, rep


def covariance(
    residuals: Residuals,
    x: FloatArray,
    *,
    sigma: dict[str, float],
    active: FloatArray | None = None,
    clustered: bool = True,
    term_weights: dict[str, float] | None = None,
    priors: PriorTerms | None = None,
) -> tuple[FloatArray, dict[str, float], dict[str, float]]:
    """Covariance of the free variables (natural units) at an optimum of the weighted plain cost.

    With per-term weights W = 1/σ_t² the estimator's covariance is the sandwich H⁻¹ M H⁻¹ with
    H = JᵀWJ and M = Σ_t σ_t⁻⁴ J_tᵀ Σ_t J_t, Σ_t the covariance of term t's errors. Without
    ``clustered``, Σ_t = σ̂_t²·I (σ̂_t² = Σe²/(n_t·(1 − p/n)), the degrees of freedom shared pro
    rata); this reduces to (JᵀJ)⁻¹·σ̂² for a single term, and to H⁻¹ when the weights match.

    With ``clustered`` (default), the errors of the BAP rows of one target corner in one frame
    are exchangeable-correlated: Σ_t = σ̂_t²·((1 − ρ_t)·I + ρ_t·11ᵀ) within each (frame, node),
    so M_t = σ̂_t²·((1 − ρ_t)·J_tᵀJ_t + ρ_t·Σ_g s_g s_gᵀ) with s_g the sum of the group's Jacobian
    rows. ρ_t is the intra-cluster correlation of term t's residuals. Detected ρ share one virtual
    depth per cluster (paper eq:radiusfinal), so their errors are nearly fully correlated
    (ρ_ρ ≈ 1) and counting them as independent makes σ several times too small (a −4.7 %
    error in F reported as 4.7σ on the 32-ray demo); the MIC rows stay independent.

    Returns
    -------
    cov : ndarray, shape (layout.size, layout.size)
        Zero rows and columns for frozen entries.
    sigma_hat : dict
        Residual standard deviation σ̂_t per term (px).
    icc : dict
        Intra-cluster correlation ρ_t used per BAP term (empty without ``clustered``).
    """
    lay = residuals.layout
    act = _active_rows(residuals, active)
    r = residuals.residuals(x) * act
    J = residuals.jacobian(x)
    sl = residuals.term_slices()
    groups = {"uv": ("u", "v"), "rho": ("rho",), "mic": ("mic_u", "mic_v")}
    groups = {k: v for k, v in groups.items() if v[0] in sl}
    n_active = float(act.sum())
    n_par = int(lay.free_mask.sum())
    H = None
    M = None
    sigma_hat: dict[str, float] = {}
    icc: dict[str, float] = {}
    for term, names in groups.items():
        mask = np.zeros(residuals.n_rows)
        for n in names:
            mask[sl[n]] = act[sl[n]]
        n_t = float(mask.sum())
        if n_t == 0:
            continue
        s2 = float(np.sum((r * mask) ** 2)) / (n_t * max(1.0 - n_par / n_active, 1e-9))
        sigma_hat[term] = float(np.sqrt(s2))
        Ht, _, pose_cols = normal_equations(residuals, J, r, mask)
        wt = 1.0 / sigma[term] ** 2 if term_weights is None else term_weights[term]
        H = Ht * wt if H is None else H + Ht * wt
        Mt = Ht * s2
        if clustered and term != "mic" and residuals.n_bap:
            c, S = _cluster_sums(residuals, J, r, mask, names, sl, pose_cols)
            icc[term] = c
            Mt = (1.0 - c) * Mt + c * s2 * (S.T @ S)
        M = Mt * (wt * wt) if M is None else M + Mt * (wt * wt)
    assert H is not None and M is not None
    if priors:
        # A prior is one more measurement, of variance σ_p², with weight w_p (module priors).
        Hp, gp = priors.normal_equations(lay, x)
        H[: gp.size, : gp.size] += Hp
        M[: gp.size, : gp.size] += priors.measurement_covariance(lay, x)
    Hinv = np.linalg.pinv(H, rcond=1e-15, hermitian=True)
    cz = Hinv @ M @ Hinv
    free = lay.free_mask
    idx = np.flatnonzero(free[: lay.n_intrinsics])
    idx = np.concatenate([idx, lay.n_intrinsics + pose_cols])
    cov = np.zeros((lay.size, lay.size))
    s = lay.scale[idx]
    cov[np.ix_(idx, idx)] = cz * np.outer(s, s)
    return cov, sigma_hat, icc


def _cluster_sums(
    residuals: Residuals, J: JacobianBlocks, r: FloatArray, mask: FloatArray, names: tuple[str, ...],
    sl: dict[str, slice], pose_cols: NDArray[np.int64],
) -> tuple[float, FloatArray]:
    """Intra-cluster correlation of one BAP term's residuals and the per-cluster sums of its
    Jacobian rows, shape (n_clusters·len(names), n_free) in the columns of :func:`normal_equations`.

    Clusters are the (frame, node) points; each component (u, v) is its own cluster.
    """
    N = residuals.n_bap
    g = residuals.point_of_row
    G = int(g.max()) + 1 if N else 0
    n_frames = J.pose_free.shape[0]
    p_i = J.intrinsics.shape[1]
    num = den = var = 0.0
    blocks = []
    for name in names:
        rows = sl[name]
        t = (rows.start - sl["u"].start) // N
        m = mask[rows]
        e = r[rows] * m
        sum_e = np.bincount(g, weights=e, minlength=G)
        cnt = np.bincount(g, weights=m, minlength=G)
        num += float(np.sum(sum_e**2) - np.sum(e**2))
        den += float(np.sum(cnt * (cnt - 1.0)))
        var += float(np.sum(e**2))
        # Σ of the group's Jacobian rows: intrinsics, and the group's own frame pose.
        Ji = J.intrinsics[rows] * m[:, None]
        Si = np.stack([np.bincount(g, weights=Ji[:, c], minlength=G) for c in range(p_i)], axis=1)
        Jp = J.poses[t] * m[:, None]
        Sp6 = np.stack([np.bincount(g, weights=Jp[:, c], minlength=G) for c in range(6)], axis=1)
        Sp = np.zeros((G, n_frames * 6))
        fr = residuals.point_frame
        for c in range(6):
            Sp[np.arange(G), fr * 6 + c] = Sp6[:, c]
        blocks.append(np.concatenate([Si, Sp[:, pose_cols]], axis=1))
    n_t = float(sum(mask[sl[n]].sum() for n in names))
    if den <= 0 or var <= 0:
        return 0.0, np.concatenate(blocks)
    icc = float(np.clip((num / den) / (var / n_t), 0.0, 1.0))
    return icc, np.concatenate(blocks)
