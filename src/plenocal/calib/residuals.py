"""Residuals of the cost Θ (paper §5.2) and their sparse-structured Jacobian.

Θ = Σ‖(u, v, ρ)_obs − P_kl(p_w)‖² + Σ‖c_obs − P_kl(O)‖²: the BAP term over every feature
(eq:completemodel through the feature's micro-lens) and the micro-image-centre (MIC) term over
every observed centre. Residual vector layout (rows)::

    [ e_u (N) | e_v (N) | e_ρ (N, only with I > 0) | e_mic_u (M) | e_mic_v (M) ]

with e = observed − predicted. Everything is vectorised over all observations (or runs in numba
kernels over them); Python loops run over parameters and frames only.

Jacobian structure (with respect to the solver's scaled variables, see
:class:`plenocal.calib.parameters.ParameterLayout`):

- intrinsics: dense columns ``J_int`` of shape (n_rows, n_free_intrinsics); columns of
  parameters that do not move the micro-image centres (F, distortion, f_i) are zero on MIC rows
  (:attr:`JacobianBlocks.mic_columns` lists the others);
- poses: each BAP row depends only on the 6 pose entries of its own frame, stored as
  ``J_pose`` of shape (n_terms, N, 6) (terms u, v[, ρ]); MIC rows do not depend on poses.

Derivatives are exact (:meth:`Residuals.jacobian_analytic`, the chain rule of
:mod:`plenocal.calib.jacobian`, with the pupil-vignetting option too); central finite
differences with steps of 1e-3 of each parameter's scale (:meth:`Residuals.jacobian_fd`, the same
pose component of all frames perturbed in one evaluation) are the tests' reference.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.calib.jacobian import (
    BapRows,
    CameraState,
    ColumnMap,
    VignettingRows,
    VirtualPointPartials,
    bap_jacobian,
    block_views,
    jacobian_block,
    lens_offsets,
    mic_jacobian,
    radius_law_partials,
    virtual_point_partials,
)
from plenocal.calib.parameters import MIC_PARAMETERS, MLA_PARAMETERS, ParameterLayout
from plenocal.errors import DataError
from plenocal.model.camera import MicroImageGrid, PlenopticCamera, lattice_corner
from plenocal.model.geometry import rodrigues
from plenocal.model.observations import BapFeatures, MicroImageCentres
from plenocal.model.projection import blur_radius_px, virtual_points
from plenocal.model.pupil import shifted_offset
from plenocal.model.target import Checkerboard
from plenocal.model.white import InternalParameters, radius_law

FloatArray = NDArray[np.float64]

FD_RELATIVE_STEP = 1e-3
"""Finite-difference step, as a fraction of each parameter's scale (central differences)."""


@dataclass(frozen=True)
class MeasuredPupilRadii:
    """R_a and R_b of the pupil-vignetting shift as the white images measure them (Ω), fixed.

    The shift depends on the aperture's preimage radius R_a = |m|/(N·s) and the lens-disc radius
    R_b = |q_i|/s of each micro-image: the two terms of the white micro-image radius law that
    pre-calibration measures directly (``omega.local``: m and q_i at each micro-image, with their
    variation across the sensor). Taken from the camera's radius law instead
    (m = ∓dF/(2D), q_i = λΔc·d/(2f_i) − Δc/2) they follow d, F, D and f_i, which the BAP data
    only determine along valleys: on PRISM's r12-b renders with plenocal's as-seen detections the
    calibration then pulled R_a from 7.33 to 5.08 px and put d 30 % and f_i 34 % off (117σ), while
    with these measured radii d is 0.3 % and F 0.06 % off (docs/model.md).

    Attributes
    ----------
    omega : InternalParameters
        Ω of the white images (its f-number is the checkerboard images').
    grid : MicroImageGrid
        Where each micro-image is (Ω's law is evaluated at its centre).
    """

    omega: InternalParameters
    grid: MicroImageGrid

    def radii_px(self, k: NDArray[np.int64], l: NDArray[np.int64], types: NDArray[np.int64]) -> tuple[FloatArray, FloatArray]:
        """(R_a, R_b) of the micro-images (k, l) of types ``types``, px, each (N,)."""
        m, q = self.omega.local(self.grid.centres(k, l), types)
        s = self.omega.pixel_size_mm
        return np.abs(m) / self.omega.f_number / s, np.abs(q) / s


@dataclass(frozen=True)
class JacobianBlocks:
    """Sparse-structured Jacobian ∂e/∂z at one point.

    Attributes
    ----------
    intrinsics : ndarray, shape (n_rows, n_free_intrinsics)
    poses : ndarray, shape (n_terms_bap, N, 6)
        Derivatives of the BAP rows (term-major: u, v[, ρ]) w.r.t. their own frame's pose.
    pose_free : ndarray of bool, shape (n_frames, 6)
        Which pose entries are free (columns of frozen entries are zero).
    mic_columns : ndarray of int, optional
        The columns of ``intrinsics`` that may be non-zero on the MIC rows (the parameters of
        :data:`~plenocal.calib.parameters.MIC_PARAMETERS`); None: all.
    """

    intrinsics: FloatArray
    poses: FloatArray
    pose_free: NDArray[np.bool_]
    mic_columns: NDArray[np.int64] | None = None


@dataclass(frozen=True)
class AnalyticState:
    """The camera, column map and virtual-point derivatives of the analytic Jacobian at one x.

    Attributes
    ----------
    camera : CameraState
    columns : ColumnMap
        The free intrinsics' columns.
    points : VirtualPointPartials or None
        Virtual points of the (frame, node) points and their derivatives (None without BAP rows).
    pose_scale : ndarray, shape (n_frames, 6)
        Factor of each pose column (−scale, 0 where frozen).
    pose_free : ndarray of bool, shape (n_frames, 6)
    mic_columns : ndarray of int
        Columns that may be non-zero on MIC rows.
    vignetting : VignettingRows or None
        The pupil-vignetting (u, v) rows' coefficients (None without the option).
    """

    camera: CameraState
    columns: ColumnMap
    points: VirtualPointPartials | None
    pose_scale: FloatArray
    pose_free: NDArray[np.bool_]
    mic_columns: NDArray[np.int64]
    vignetting: VignettingRows | None = None


class Residuals:
    """The residual function of one calibration problem.

    Parameters
    ----------
    layout : ParameterLayout
    bap : BapFeatures
        Linked features (``node`` >= 0) of the layout's frames.
    mic : MicroImageCentres
        Observed micro-image centres (may be empty: held-out evaluation).
    board : Checkerboard
    use_rho : bool
        Include the ρ term (forced off when the layout has I = 0).
    pupil_vignetting : bool
        Predict (u, v) with the pupil-vignetting shift (:mod:`plenocal.model.pupil`; ignored for
        I = 0).
    pupil_radii : MeasuredPupilRadii, optional
        The shift's R_a, R_b from the white images, fixed; default: the camera's radius law
        (:func:`plenocal.model.white.radius_law`), which moves with Θ.
    """

    def __init__(
        self,
        layout: ParameterLayout,
        bap: BapFeatures,
        mic: MicroImageCentres,
        board: Checkerboard,
        *,
        use_rho: bool = True,
        pupil_vignetting: bool = False,
        pupil_radii: MeasuredPupilRadii | None = None,
    ) -> None:
        self.layout = layout
        self.pupil_vignetting = bool(pupil_vignetting and layout.n_types > 0)
        self.pupil_radii = pupil_radii
        self.board = board
        frames = np.asarray(layout.frames)
        if np.any(bap.node < 0) or np.any(bap.node >= board.n_nodes):
            raise DataError("BAP features must be linked to board nodes (0 <= node < n_nodes)")
        pos = {f: i for i, f in enumerate(layout.frames)}
        if not np.all(np.isin(bap.frame, frames)):
            raise DataError("BAP features refer to frames without a pose in the layout")
        fidx = np.array([pos[int(f)] for f in np.unique(bap.frame)], dtype=np.int64)
        lut = np.zeros(int(bap.frame.max(initial=0)) + 1, dtype=np.int64)
        lut[np.unique(bap.frame)] = fidx
        frame_index = lut[bap.frame] if len(bap) else np.zeros(0, dtype=np.int64)
        order = np.argsort(frame_index, kind="stable")
        self.order = order
        """Row permutation: internal BAP row i is input feature ``order[i]``."""
        self.bap = bap.select(order)
        self.frame_index = frame_index[order]
        n_frames = len(layout.frames)
        self.frame_start = np.searchsorted(self.frame_index, np.arange(n_frames + 1))
        # Unique (frame, node) points: the pose and the main lens act on these only.
        key = self.frame_index * board.n_nodes + self.bap.node.astype(np.int64)
        ukey, self.point_of_row = np.unique(key, return_inverse=True)
        self.point_frame = ukey // board.n_nodes
        self.point_world = board.node_points(ukey % board.n_nodes)
        lattice = layout.template.mla.lattice
        self.k = self.bap.k.astype(np.int64)
        self.l = self.bap.l.astype(np.int64)
        self.unit_gx, self.unit_gy = lattice.positions(self.k, self.l, (1.0, 1.0))
        self.types = layout.template.mla.types.type_of(self.k, self.l)
        self.mic = mic
        self.mic_gx, self.mic_gy = lattice.positions(mic.k.astype(np.int64), mic.l.astype(np.int64), (1.0, 1.0))
        ax, ay = lens_offsets(layout.template, self.unit_gx, self.unit_gy)
        self.bap_rows = BapRows(self.point_of_row.astype(np.int64), self.frame_index.astype(np.int64), ax, ay,
                                self.types.astype(np.int64))
        self.mic_offsets = lens_offsets(layout.template, self.mic_gx, self.mic_gy)
        self.use_rho = bool(use_rho and layout.n_types > 0)
        self.n_bap = len(self.bap)
        self.n_mic = len(mic)
        self.n_terms_bap = 3 if self.use_rho else 2
        self.rho_observed = self.bap.has_rho
        """(N,) rows whose ρ was observed; a single view (ρ NaN) has a zero ρ residual and Jacobian row."""
        obs = [self.bap.u, self.bap.v] + ([np.where(self.rho_observed, self.bap.rho, 0.0)] if self.use_rho else []) + [mic.u, mic.v]
        self.observed = np.concatenate(obs)
        self.n_rows = self.observed.size
        self.observed_rows = np.ones(self.n_rows)
        """0/1 per row: 0 on the ρ rows of single views (nothing observed), 1 elsewhere. The solver's
        default ``active`` and the start of every row mask (rejection never turns these rows on)."""
        if self.use_rho:
            self.observed_rows[2 * self.n_bap : 3 * self.n_bap] = self.rho_observed
        self._fixed_radii = pupil_radii.radii_px(self.k, self.l, self.types) \
            if pupil_radii is not None and self.pupil_vignetting else None
        self._shift_key: bytes | None = None
        self._shift_cache: tuple[bytes | None, FloatArray, FloatArray] = (None, np.zeros((0, 2)), np.zeros((0, 5)))

    # --- row bookkeeping -------------------------------------------------------------------
    def term_slices(self) -> dict[str, slice]:
        """Row ranges of each term: ``u``, ``v``, ``rho`` (if used), ``mic_u``, ``mic_v``."""
        N, M = self.n_bap, self.n_mic
        names = ["u", "v"] + (["rho"] if self.use_rho else [])
        out = {n: slice(i * N, (i + 1) * N) for i, n in enumerate(names)}
        b = len(names) * N
        out["mic_u"] = slice(b, b + M)
        out["mic_v"] = slice(b + M, b + 2 * M)
        return out

    # --- predictions ---------------------------------------------------------------------
    def lens_centres(self, camera: PlenopticCamera, gx: FloatArray, gy: FloatArray) -> FloatArray:
        """C(k, l) from unit lattice positions (same as ``micro_lens_centres``), shape (n, 3)."""
        mla = camera.mla
        p0, p1 = mla.pitch_mm
        cx, cy = lattice_corner(mla.lattice, mla.pitch_mm)
        R = mla.rotation
        lx, ly = cx - p0 * gx, cy - p1 * gy
        t = mla.translation_mm
        return np.stack(
            [t[0] + R[0, 0] * lx + R[0, 1] * ly, t[1] + R[1, 0] * lx + R[1, 1] * ly, t[2] + R[2, 0] * lx + R[2, 1] * ly],
            axis=-1,
        )

    def predict_bap(
        self,
        camera: PlenopticCamera,
        rotvecs: FloatArray,
        translations: FloatArray,
        centres: FloatArray | None = None,
    ) -> list[FloatArray]:
        """Predicted u, v[, ρ] of every (sorted) feature (paper eq:completemodel).

        Parameters
        ----------
        rotvecs, translations : ndarray, shape (n_frames, 3)
            cam_from_world rotation vectors (rad) and translations (mm).
        centres : ndarray, shape (N, 3), optional
            Cached micro-lens centres of the rows.

        Returns
        -------
        list of ndarray, each shape (N,)
        """
        u, v, rho, C = self._chief_ray(camera, rotvecs, translations, centres)
        if self.pupil_vignetting:
            assert rho is not None
            e_uv, mic, ra, rb = self._vignetting_inputs(camera, u, v, C)
            # With its partial derivatives (a few % more): the Jacobian at the same x reuses them.
            shift = shifted_offset(np.hypot(e_uv[:, 0], e_uv[:, 1]), rho, ra, rb, partials=True)
            self._shift_cache = (self._shift_key, e_uv, shift)
            u, v = _radially_moved(e_uv, mic, shift[:, 0])
        out = [u, v]
        if self.use_rho:
            assert rho is not None
            out.append(rho)
        return out

    def _chief_ray(
        self, camera: PlenopticCamera, rotvecs: FloatArray, translations: FloatArray, centres: FloatArray | None
    ) -> tuple[FloatArray, FloatArray, FloatArray | None, FloatArray]:
        """(u, v) of the chief rays, ρ (None when neither the ρ term nor vignetting needs it) and the
        lens centres C (N, 3) of every row."""
        R = rodrigues(rotvecs) if len(rotvecs) else np.zeros((0, 3, 3))
        fi = self.point_frame
        pc = np.einsum("nij,nj->ni", R[fi], self.point_world) + translations[fi]
        pu = virtual_points(camera, pc)
        rows = self.point_of_row
        P = pu[rows]
        C = self.lens_centres(camera, self.unit_gx, self.unit_gy) if centres is None else centres
        zs = -camera.sensor.distance_mm
        t = (zs - C[:, 2]) / (P[:, 2] - C[:, 2])
        s = camera.sensor.pixel_size_mm
        u0, v0 = camera.sensor.principal_point_px
        u = u0 - (C[:, 0] + t * (P[:, 0] - C[:, 0])) / s
        v = v0 - (C[:, 1] + t * (P[:, 1] - C[:, 1])) / s
        rho = blur_radius_px(camera, P, C, self.types) if self.use_rho or self.pupil_vignetting else None
        return u, v, rho, C

    def _vignetting_inputs(
        self, camera: PlenopticCamera, u: FloatArray, v: FloatArray, C: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Chief-ray offsets from the micro-image centres (N, 2), the centres (N, 2) (the MIC
        projection of the rows' lenses), R_a (N,) and R_b (N,) of the rows.

        The shift depends on Θ through the micro-image centres and, without
        :class:`MeasuredPupilRadii`, the radius law m = ∓dF/(2D), q_i = Δ_C·d/(2 f_i) − Δc/2 and
        the fixed f-number N.
        """
        mic = np.stack(self._mic_from_centres(camera, C), axis=-1)
        if self._fixed_radii is not None:
            ra, rb = self._fixed_radii
        else:
            s = camera.sensor.pixel_size_mm
            m, q = radius_law(camera)
            ra = np.full(u.shape, abs(m) / camera.main_lens.f_number / s)
            rb = np.abs(np.asarray(q, dtype=np.float64))[self.types] / s
        return np.stack([u, v], axis=-1) - mic, mic, ra, rb

    @staticmethod
    def _mic_from_centres(camera: PlenopticCamera, C: FloatArray) -> list[FloatArray]:
        """Micro-image centres (the exit-pupil centre (0, 0, −e) through the lens centres C (n, 3)
        onto the sensor, :func:`~plenocal.model.projection.micro_image_centres`), [u, v] each (n,)."""
        e = camera.main_lens.exit_pupil_mm
        scale = (camera.sensor.distance_mm - e) / (-C[:, 2] - e)
        s = camera.sensor.pixel_size_mm
        u0, v0 = camera.sensor.principal_point_px
        return [u0 - C[:, 0] * scale / s, v0 - C[:, 1] * scale / s]

    def predict_mic(self, camera: PlenopticCamera) -> list[FloatArray]:
        """Predicted micro-image centres (the exit-pupil centre through C(k, l) onto the sensor), [u, v] each (M,)."""
        return self._mic_from_centres(camera, self.lens_centres(camera, self.mic_gx, self.mic_gy))

    def predict(self, x: FloatArray) -> FloatArray:
        """All predictions in row order, shape (n_rows,)."""
        camera = self.layout.unpack_camera(x)
        rv, tr = self.layout.pose_arrays(x)
        self._shift_key = x.tobytes()
        try:
            bap = self.predict_bap(camera, rv, tr)
        finally:
            self._shift_key = None
        return np.concatenate(bap + self.predict_mic(camera))

    def residuals(self, x: FloatArray) -> FloatArray:
        """e = observed − predicted at the full parameter vector ``x``, shape (n_rows,); 0 on rows
        nothing observed (single views' ρ, :attr:`observed_rows`)."""
        e = self.observed - self.predict(x)
        return e if self._all_observed else e * self.observed_rows

    @functools.cached_property
    def _all_observed(self) -> bool:
        return bool(np.all(self.observed_rows > 0))

    def _unobserved_rows_zeroed(self, blocks: JacobianBlocks) -> JacobianBlocks:
        """The Jacobian with the rows of :attr:`observed_rows` = 0 set to zero (in place)."""
        if not self._all_observed:
            blocks.intrinsics[self.observed_rows == 0] = 0.0
            blocks.poses[2][~self.rho_observed] = 0.0
        return blocks

    # --- Jacobian ------------------------------------------------------------------------
    @property
    def default_jacobian_method(self) -> str:
        """``"analytic"`` (with or without pupil vignetting)."""
        return "analytic"

    def mic_columns(self) -> NDArray[np.int64]:
        """Free-intrinsic columns that move the micro-image centres (:data:`MIC_PARAMETERS`)."""
        return self._column_layout[3]

    @functools.cached_property
    def _column_layout(self) -> tuple[ColumnMap, FloatArray, NDArray[np.bool_], NDArray[np.int64]]:
        """(free-intrinsic :class:`ColumnMap`, pose column factors (n_frames, 6), free pose entries
        (n_frames, 6), MIC columns) of the layout (immutable, so computed once)."""
        lay = self.layout
        n_int = lay.n_intrinsics
        free = lay.free_mask
        scale = lay.scale
        free_int = np.flatnonzero(free[:n_int])
        names = [lay.intrinsic_names[j] for j in free_int]
        n_frames = len(lay.frames)
        pose_free = free[n_int:].reshape(n_frames, 6) if n_frames else np.zeros((0, 6), bool)
        mic = np.flatnonzero([n in MIC_PARAMETERS for n in names]).astype(np.int64)
        return ColumnMap.of(names, scale[free_int]), -scale[n_int:].reshape(n_frames, 6) * pose_free, pose_free, mic

    def jacobian(self, x: FloatArray, *, method: str | None = None) -> JacobianBlocks:
        """Jacobian ∂e/∂z of the residuals w.r.t. the scaled free variables z, at ``x``.

        Parameters
        ----------
        x : ndarray, shape (layout.size,)
            Full parameter vector, natural units.
        method : {"analytic", "fd"}, optional
            ``"analytic"``: exact derivatives by the chain rule (:mod:`plenocal.calib.jacobian`);
            ``"fd"``: central finite differences (:meth:`jacobian_fd`). Default: analytic.
        """
        if method is None:
            method = self.default_jacobian_method
        if method == "fd":
            return self.jacobian_fd(x)
        if method != "analytic":
            raise ValueError(f"method must be 'analytic' or 'fd', got {method!r}")
        return self.jacobian_analytic(x)

    def analytic_state(self, x: FloatArray) -> AnalyticState:
        """What the analytic Jacobian of every row needs at ``x`` (:class:`AnalyticState`)."""
        lay = self.layout
        camera = lay.unpack_camera(x)
        vp = None
        if self.n_bap:
            rv, tr = lay.pose_arrays(x)
            vp = virtual_point_partials(camera, rv, tr, self.point_world, self.point_frame)
        columns, pose_scale, pose_free, mic_columns = self._column_layout
        vig = None
        if self.pupil_vignetting and self.n_bap:
            key, e_uv, shift = self._shift_cache
            if key != x.tobytes():  # not the last residuals' x
                self.predict(x)
                key, e_uv, shift = self._shift_cache
            if self._fixed_radii is None:
                d_ra, d_rb = radius_law_partials(camera, columns)
            else:
                d_ra, d_rb = np.zeros(columns.kind_a.size), np.zeros((camera.n_types, columns.kind_a.size))
            vig = VignettingRows.of(e_uv, shift, d_ra, d_rb)
        return AnalyticState(CameraState.of(camera), columns, vp, pose_scale, pose_free, mic_columns, vig)

    def jacobian_analytic(self, x: FloatArray) -> JacobianBlocks:
        """Exact Jacobian (chain rule through eq:completemodel and, with the option, the
        pupil-vignetting shift, :mod:`plenocal.calib.jacobian`).

        Same blocks as :meth:`jacobian_fd`; frozen pose entries have zero columns.
        """
        st = self.analytic_state(x)
        N, M, nt = self.n_bap, self.n_mic, self.n_terms_bap
        p_i = st.columns.kind_a.size
        J = np.empty((self.n_rows, p_i))
        J_pose = np.empty((nt, N, 6))
        if N:
            assert st.points is not None
            out_int, out_pose, _ = block_views(jacobian_block(nt * N, p_i), p_i)
            bap_jacobian(st.camera, st.points, self.bap_rows, nt, st.columns, st.pose_scale, out_int, out_pose,
                         vignetting=st.vignetting)
            J[: nt * N] = out_int[:, :p_i]  # without the spare column of a pose-only block
            J_pose[...] = out_pose.reshape(nt, N, 6)
        if M:
            mic_jacobian(st.camera, self.mic_offsets, st.columns, J[nt * N :])
        return self._unobserved_rows_zeroed(JacobianBlocks(J, J_pose, st.pose_free, st.mic_columns))

    def jacobian_fd(self, x: FloatArray) -> JacobianBlocks:
        """Central-difference Jacobian of the residuals w.r.t. the scaled free variables.

        Cost: two BAP evaluations per free intrinsic (plus two MIC evaluations for the ones in
        :data:`MIC_PARAMETERS`) and 12 BAP evaluations for all poses together. The reference for
        the analytic Jacobian's tests.
        """
        lay = self.layout
        free = lay.free_mask
        scale = lay.scale
        names = lay.intrinsic_names
        n_int = lay.n_intrinsics
        free_int = np.flatnonzero(free[:n_int])
        N, M, nt = self.n_bap, self.n_mic, self.n_terms_bap
        J_int = np.zeros((self.n_rows, free_int.size))
        camera0 = lay.unpack_camera(x)
        rv0, tr0 = lay.pose_arrays(x)
        C0 = self.lens_centres(camera0, self.unit_gx, self.unit_gy)
        for col, j in enumerate(free_int):
            h = FD_RELATIVE_STEP * scale[j]
            xp, xm = x.copy(), x.copy()
            xp[j] += h
            xm[j] -= h
            cp, cm = lay.unpack_camera(xp), lay.unpack_camera(xm)
            moves_c = names[j] in MLA_PARAMETERS
            bp = self.predict_bap(cp, rv0, tr0, None if moves_c else C0)
            bm = self.predict_bap(cm, rv0, tr0, None if moves_c else C0)
            # e = obs − pred, derivative w.r.t. z_j = x_j / scale_j: −Δpred/(2h)·scale = −Δpred/(2·step).
            f = -1.0 / (2.0 * FD_RELATIVE_STEP)
            for t in range(nt):
                J_int[t * N : (t + 1) * N, col] = f * (bp[t] - bm[t])
            if names[j] in MIC_PARAMETERS and M:
                mp, mm = self.predict_mic(cp), self.predict_mic(cm)
                J_int[nt * N : nt * N + M, col] = f * (mp[0] - mm[0])
                J_int[nt * N + M :, col] = f * (mp[1] - mm[1])
        n_frames = len(lay.frames)
        pose_free = free[n_int:].reshape(n_frames, 6) if n_frames else np.zeros((0, 6), bool)
        J_pose = np.zeros((nt, N, 6))
        for c in range(6):
            if not pose_free[:, c].any():
                continue
            h = FD_RELATIVE_STEP * scale[n_int + c]
            p0 = np.concatenate([rv0, tr0], axis=1)
            pp, pm = p0.copy(), p0.copy()
            pp[:, c] += h
            pm[:, c] -= h
            bp = self.predict_bap(camera0, pp[:, :3], pp[:, 3:], C0)
            bm = self.predict_bap(camera0, pm[:, :3], pm[:, 3:], C0)
            f = -1.0 / (2.0 * FD_RELATIVE_STEP)
            free_rows = pose_free[self.frame_index, c]
            for t in range(nt):
                J_pose[t, :, c] = np.where(free_rows, f * (bp[t] - bm[t]), 0.0)
        return self._unobserved_rows_zeroed(JacobianBlocks(J_int, J_pose, pose_free, self.mic_columns()))


def _radially_moved(e_uv: FloatArray, mic: FloatArray, eo: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(u, v) at offset ``eo`` (N,) from the centres ``mic`` (N, 2) along the offsets ``e_uv`` (N, 2)."""
    en = np.hypot(e_uv[:, 0], e_uv[:, 1])
    f = np.where(en > 1e-12, eo / np.maximum(en, 1e-12), 1.0)
    return mic[:, 0] + e_uv[:, 0] * f, mic[:, 1] + e_uv[:, 1] * f
