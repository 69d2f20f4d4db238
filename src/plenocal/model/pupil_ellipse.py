"""The main aperture's preimage in each micro-image as an ellipse (beyond the paper).

The paper's model (and :mod:`plenocal.model.pupil`) takes the part of a micro-image that the main
aperture lights, seen from a pixel, as the disc of radius R_a = |m|/(N·s) centred on the
micro-image centre c (the grid node). A real lens's pupil seen from off-axis lenslets is displaced
and radially compressed (pupil aberration; ``docs/model.md``, "White micro-images that a real
lens does not make as the model says"), so there it is an ellipse:

    |A·(x − c − o − R_b·z)| ≤ R_a,

o the ellipse's centre offset from the node (px), A a symmetric positive 2 × 2 matrix (the
inverse square root of the ellipse's shape: semi-axes R_a/λ_i(A) along A's eigenvectors). A = I,
o = 0 is the paper's disc. :class:`PupilEllipses` holds o and A per micro-image, and a flag that
is false where the white follows the disc model (A, o are then exactly the identity and zero, and
every consumer takes the disc's own code path, so results there are unchanged bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class PupilEllipses:
    """Per micro-image (M,) the main aperture's preimage (module docstring)."""

    offset_px: FloatArray
    """(M, 2) ellipse centre − micro-image centre (grid node), px."""
    matrix: FloatArray
    """(M, 3) (a11, a12, a22) of the symmetric A; (1, 0, 1) where not ``elliptical``."""
    elliptical: NDArray[np.bool_]
    """(M,) the ellipse departs from the disc (False: o = 0 and A = I exactly)."""

    @staticmethod
    def discs(n: int) -> PupilEllipses:
        """The paper's disc for ``n`` micro-images."""
        mat = np.zeros((n, 3))
        mat[:, 0] = 1.0
        mat[:, 2] = 1.0
        return PupilEllipses(np.zeros((n, 2)), mat, np.zeros(n, dtype=bool))

    def __len__(self) -> int:
        return len(self.elliptical)

    def take(self, idx: NDArray) -> PupilEllipses:
        """The micro-images ``idx`` (an index array or a boolean mask)."""
        return PupilEllipses(self.offset_px[idx], self.matrix[idx], self.elliptical[idx])

    @property
    def semi_axis_scales(self) -> FloatArray:
        """(M, 2) the ellipse's semi-axes in units of R_a (smallest first): 1/λ(A), largest λ first."""
        lam = _eigenvalues(self.matrix)
        return 1.0 / np.maximum(lam[:, ::-1], 1e-12)

    def kernel_arrays(self) -> tuple[NDArray[np.bool_], FloatArray]:
        """(ell (M,) bool, pupil (M, 6) float64: o_x, o_y, a11, a12, a22, A's largest eigenvalue),
        C-contiguous, as the render kernels take them."""
        lam = _eigenvalues(self.matrix)
        pup = np.concatenate([self.offset_px, self.matrix, np.where(self.elliptical, lam[:, 1], 1.0)[:, None]], axis=1)
        return np.ascontiguousarray(self.elliptical, dtype=np.bool_), np.ascontiguousarray(pup, dtype=np.float64)

    def first_order(self, centres_px: FloatArray, radius_aperture_px: FloatArray) -> tuple[FloatArray, FloatArray]:
        """The disc that stands in for the ellipse in the first-order (radial) shift model
        (:func:`plenocal.model.projection.pupil_shift_px`): centred c + o, of the ellipse's
        area-equivalent radius R_a/√det A. Where not ``elliptical``, (c, R_a) unchanged.

        centres_px : (M, 2); radius_aperture_px : (M,). Returns centres (M, 2), radii (M,).
        """
        c = np.asarray(centres_px, dtype=np.float64)
        ra = np.asarray(radius_aperture_px, dtype=np.float64)
        a11, a12, a22 = self.matrix.T
        det = np.maximum(a11 * a22 - a12 * a12, 1e-12)
        e = self.elliptical
        return np.where(e[:, None], c + self.offset_px, c), np.where(e, ra / np.sqrt(det), ra)


def _eigenvalues(mat: FloatArray) -> FloatArray:
    """(M, 2) eigenvalues (ascending) of the symmetric 2 × 2 matrices (a11, a12, a22) (M, 3)."""
    a11, a12, a22 = np.asarray(mat, dtype=np.float64).T
    mean = 0.5 * (a11 + a22)
    half = np.hypot(0.5 * (a11 - a22), a12)
    return np.stack([mean - half, mean + half], axis=1)


def matrix_from_shape(shape: FloatArray) -> FloatArray:
    """A = S^(−1/2) (M, 3) for the ellipse whose second-moment matrix is S·R_a²/4: S (M, 3) =
    (s11, s12, s22), symmetric positive, the ellipse's moments relative to the disc of radius R_a
    (S = I is the disc). Closed form for 2 × 2: √S = (S + √det S·I)/√(tr S + 2√det S)."""
    s11, s12, s22 = np.asarray(shape, dtype=np.float64).T
    det = np.maximum(s11 * s22 - s12 * s12, 1e-12)
    rd = np.sqrt(det)
    t = np.sqrt(s11 + s22 + 2.0 * rd)
    r11, r12, r22 = (s11 + rd) / t, s12 / t, (s22 + rd) / t  # √S
    dr = r11 * r22 - r12 * r12
    return np.stack([r22 / dr, -r12 / dr, r11 / dr], axis=1)
