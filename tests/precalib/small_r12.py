"""The small R12-like camera of the pre-calibration tests (tests/precalib/conftest.py's fixtures and
tests that tilt it): a module of its own, imported by name, because ``from conftest import`` finds
whichever test folder's conftest was imported first (tests/cli's when both folders are collected)."""

from __future__ import annotations

from plenocal.model import (
    Configuration,
    Distortion,
    Lattice,
    LatticeKind,
    MainLens,
    MicroLensArray,
    PlenopticCamera,
    Sensor,
    TypeLayout,
)


def small_r12_camera() -> PlenopticCamera:
    """R12-A's optics (the reference's calibrated values) on a 44×35 crop of its MLA.

    The MLA is placed so that micro-image (0, 0) sits at (−1.55, 4.80) px, as in the reference's
    R12-A grid (half visible in the top-left corner: the index convention of precalib.grid).
    """
    lattice = Lattice(LatticeKind.HEX_ROWS, 44, 35)
    D, d, s, p, W, H = 56.700742, 0.324774, 0.0055, 0.12745529429620778, 1020, 710
    focal = (0.578182, 0.505416, 0.552079)

    def make(tx: float, ty: float) -> PlenopticCamera:
        mla = MicroLensArray(lattice, (p, p), (0.0, 0.0, 2e-5), (tx, ty, -D), focal, TypeLayout.raytrix(3))
        return PlenopticCamera(
            MainLens(49.714, 4.0), Distortion(), mla, Sensor(s, W, H, ((W - 1) / 2, (H - 1) / 2), D + d),
            configuration=Configuration.GALILEAN, focus_distance_mm=450.0,
        )

    cam = make(0.0, 0.0)
    g, lam = cam.grid, cam.lambda_
    return make((g.offset_px[0] + 1.55) * s * lam, (g.offset_px[1] - 4.80) * s * lam)
