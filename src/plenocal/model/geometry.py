"""Rigid transforms: rotations (matrices, rotation vectors, XYZ Euler angles) and named poses; and
a deterministic point set on the unit disc (:func:`vogel_disc`), for quadratures over a lens.

Poses are named after their frames (``cam_from_world``: ``p_cam = R @ p_world + t``); see
``docs/conventions.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def rodrigues(rotvec: ArrayLike) -> FloatArray:
    """Rotation matrices from rotation vectors (axis × angle, radians).

    Parameters
    ----------
    rotvec : array_like, shape (3,) or (N, 3)

    Returns
    -------
    ndarray, shape (3, 3) or (N, 3, 3)
    """
    w = np.asarray(rotvec, dtype=np.float64)
    single = w.ndim == 1
    w = np.atleast_2d(w)
    theta = np.linalg.norm(w, axis=1)
    small = theta < 1e-12
    safe = np.where(small, 1.0, theta)
    k = w / safe[:, None]
    kx, ky, kz = k[:, 0], k[:, 1], k[:, 2]
    zeros = np.zeros_like(kx)
    K = np.stack(
        [
            np.stack([zeros, -kz, ky], axis=1),
            np.stack([kz, zeros, -kx], axis=1),
            np.stack([-ky, kx, zeros], axis=1),
        ],
        axis=1,
    )
    s = np.sin(theta)[:, None, None]
    c = (1.0 - np.cos(theta))[:, None, None]
    R = np.eye(3)[None] + s * K + c * (K @ K)
    # Second-order series below 1e-12 rad keeps derivatives smooth through zero.
    if np.any(small):
        Wx = np.zeros((int(small.sum()), 3, 3))
        ws = w[small]
        Wx[:, 0, 1], Wx[:, 0, 2] = -ws[:, 2], ws[:, 1]
        Wx[:, 1, 0], Wx[:, 1, 2] = ws[:, 2], -ws[:, 0]
        Wx[:, 2, 0], Wx[:, 2, 1] = -ws[:, 1], ws[:, 0]
        R[small] = np.eye(3)[None] + Wx + 0.5 * (Wx @ Wx)
    return R[0] if single else R


def rotvec_from_matrix(R: ArrayLike) -> FloatArray:
    """Rotation vector (axis × angle) of a rotation matrix, shape (3, 3) -> (3,)."""
    M = np.asarray(R, dtype=np.float64)
    cos_t = np.clip((np.trace(M) - 1.0) / 2.0, -1.0, 1.0)
    theta = float(np.arccos(cos_t))
    v = np.array([M[2, 1] - M[1, 2], M[0, 2] - M[2, 0], M[1, 0] - M[0, 1]])
    if theta < 1e-7:
        return 0.5 * v
    if np.pi - theta < 1e-6:
        # Near pi: axis from the symmetric part.
        B = (M + np.eye(3)) / 2.0
        axis = np.sqrt(np.clip(np.diag(B), 0.0, None))
        i = int(np.argmax(axis))
        axis = B[i] / np.sqrt(B[i, i])
        return theta * axis / np.linalg.norm(axis)
    return theta / (2.0 * np.sin(theta)) * v


def matrix_from_euler_xyz(angles_rad: ArrayLike) -> FloatArray:
    """R = Rx(θx) · Ry(θy) · Rz(θz) (Eigen's ``eulerAngles(0, 1, 2)`` convention).

    Parameters
    ----------
    angles_rad : array_like, shape (3,)
        (θx, θy, θz) in radians.
    """
    ax, ay, az = (float(a) for a in np.asarray(angles_rad, dtype=np.float64))
    cx, sx, cy, sy, cz, sz = np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay), np.cos(az), np.sin(az)
    Rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    Ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    Rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return Rx @ Ry @ Rz


def euler_xyz_from_matrix(R: ArrayLike) -> FloatArray:
    """Inverse of :func:`matrix_from_euler_xyz` for |θy| < π/2, shape (3, 3) -> (3,)."""
    M = np.asarray(R, dtype=np.float64)
    ay = np.arcsin(np.clip(M[0, 2], -1.0, 1.0))
    ax = np.arctan2(-M[1, 2], M[2, 2])
    az = np.arctan2(-M[0, 1], M[0, 0])
    return np.array([ax, ay, az])


@dataclass(frozen=True, eq=False)
class Pose:
    """A rigid transform named after its frames: ``p_to = rotation @ p_from + translation``.

    Plenocal stores frame poses as ``cam_from_world`` (world = checkerboard).
    """

    rotation: FloatArray
    translation: FloatArray

    def __post_init__(self) -> None:
        R = np.asarray(self.rotation, dtype=np.float64).reshape(3, 3)
        t = np.asarray(self.translation, dtype=np.float64).reshape(3)
        object.__setattr__(self, "rotation", R)
        object.__setattr__(self, "translation", t)

    @classmethod
    def identity(cls) -> Pose:
        return cls(np.eye(3), np.zeros(3))

    @classmethod
    def from_rotvec(cls, rotvec: ArrayLike, translation: ArrayLike) -> Pose:
        return cls(rodrigues(rotvec), np.asarray(translation, dtype=np.float64))

    @property
    def rotvec(self) -> FloatArray:
        return rotvec_from_matrix(self.rotation)

    def inverse(self) -> Pose:
        Rt = self.rotation.T
        return Pose(Rt, -Rt @ self.translation)

    def apply(self, points: ArrayLike) -> FloatArray:
        """Transform points, shape (..., 3) -> (..., 3)."""
        p = np.asarray(points, dtype=np.float64)
        return p @ self.rotation.T + self.translation

    def compose(self, other: Pose) -> Pose:
        """``self ∘ other``: first ``other`` then ``self``."""
        return Pose(self.rotation @ other.rotation, self.rotation @ other.translation + self.translation)

    def allclose(self, other: Pose, *, atol: float = 1e-9) -> bool:
        return bool(
            np.allclose(self.rotation, other.rotation, atol=atol)
            and np.allclose(self.translation, other.translation, atol=atol)
        )

    def __repr__(self) -> str:
        r = np.array2string(self.rotvec, precision=6)
        t = np.array2string(self.translation, precision=4)
        return f"Pose(rotvec={r}, translation={t})"


def vogel_disc(n: int) -> FloatArray:
    """``n`` points uniform on the unit disc (Vogel's spiral: radius √((i + ½)/n), golden-angle
    steps), shape (n, 2): a deterministic quadrature of a lens's aperture."""
    i = np.arange(n) + 0.5
    r = np.sqrt(i / n)
    t = i * np.pi * (3.0 - np.sqrt(5.0))
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)
