"""κ calibration (paper §5.3): pairs, windows, batched blur, recovery on synthetic and ray-traced images."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from scipy.ndimage import gaussian_filter
from scipy.signal import fftconvolve

from plenocal.calib.kappa import (
    MARGIN_PX,
    blur_windows,
    calibrate_kappa,
    central_features,
    default_max_offset_px,
    relative_blur_pairs,
    sample_windows,
)
from plenocal.errors import DataError
from plenocal.model.lattice import TypeLayout
from plenocal.model.observations import BapFeatures

LAYOUT = TypeLayout.raytrix(3)


def _features(frame, k, l, rho, node, u=None, v=None):
    n = len(frame)
    u = np.full(n, 20.0) if u is None else u
    v = np.full(n, 20.0) if v is None else v
    return BapFeatures(frame=frame, k=k, l=l, u=u, v=v, rho=rho, node=node, cluster=np.full(n, -1))


def test_pairs_link_different_types_of_one_cluster_and_order_by_blur():
    # frame 0 node 3: lenses k = 0, 1, 2, 3 on row 0 -> types 0, 1, 2, 0; frame 1 node 3: one lens.
    f = _features(
        frame=[0, 0, 0, 0, 1, 0],
        k=[0, 1, 2, 3, 4, 7],
        l=[0, 0, 0, 0, 0, 0],
        rho=[-1.0, -3.0, -2.0, -1.5, -2.0, -2.5],
        node=[3, 3, 3, 3, 3, 5],
    )
    p = relative_blur_pairs(f, LAYOUT)
    # types 0,1,2,0 -> pairs (0,1) (0,2) (1,2) (1,3) (2,3); (0,3) share type 0.
    got = sorted(zip(p.ref.tolist(), p.edi.tolist(), strict=True))
    assert got == sorted([(1, 0), (2, 0), (1, 2), (1, 3), (2, 3)])
    assert np.all(np.abs(f.rho[p.ref]) >= np.abs(f.rho[p.edi]))
    i = got.index((1, 0))
    np.testing.assert_allclose(p.rho_r_px[i], np.sqrt(9.0 - 1.0))
    assert set(p.frame.tolist()) == {0}


def test_windows_match_opencv_getrectsubpix():
    rng = np.random.default_rng(0)
    img = rng.random((40, 50)).astype(np.float32)
    u = np.array([10.3, 25.77, 1.2, 48.6])
    v = np.array([12.9, 20.01, 2.5, 37.4])
    w = sample_windows(img, u, v, 9)
    for n in range(len(u)):
        ref = cv2.getRectSubPix(img, (9, 9), (float(u[n]), float(v[n])))
        np.testing.assert_allclose(w[n], ref, atol=2e-3)  # OpenCV interpolates with 8-bit-like fixed-point weights


def test_batched_blur_is_a_valid_gaussian_convolution():
    rng = np.random.default_rng(1)
    big = rng.random((3, 9 + 2 * MARGIN_PX, 9 + 2 * MARGIN_PX)).astype(np.float32)
    sigma = np.array([0.0, 0.8, 1.7])
    out = blur_windows(big, sigma)
    assert out.shape == (3, 9, 9)
    np.testing.assert_allclose(out[0], big[0, MARGIN_PX:-MARGIN_PX, MARGIN_PX:-MARGIN_PX], atol=1e-6)
    for n in (1, 2):
        ref = gaussian_filter(big[n].astype(np.float64), sigma[n], mode="constant", truncate=MARGIN_PX / sigma[n])
        # normalisation of the truncated kernel differs from scipy's by < 1e-3 at these σ
        np.testing.assert_allclose(out[n], ref[MARGIN_PX:-MARGIN_PX, MARGIN_PX:-MARGIN_PX], atol=2e-3)


def _corner(radius: float, theta: float, offset, n: int, psf: str, s: int = 6) -> np.ndarray:
    """A checkerboard corner blurred by a disc (radius) or Gaussian (σ = radius/2) PSF, pixel-integrated."""
    pad = int(np.ceil(2 * radius * s)) + 1
    t = (np.arange(-pad, n * s + pad) + 0.5) / s - 0.5 - (n - 1) / 2
    X, Y = np.meshgrid(t, t)
    c, sn = np.cos(theta), np.sin(theta)
    xr = c * (X - offset[0]) + sn * (Y - offset[1])
    yr = -sn * (X - offset[0]) + c * (Y - offset[1])
    img = ((xr > 0) ^ (yr > 0)).astype(float)
    k = np.arange(-pad, pad + 1) / s
    KX, KY = np.meshgrid(k, k)
    ker = (KX**2 + KY**2 <= radius**2).astype(float) if psf == "disc" else np.exp(-(KX**2 + KY**2) / (radius**2 / 2))
    img = fftconvolve(img, ker / ker.sum(), mode="valid")
    return img.reshape(n, s, n, s).mean(axis=(1, 3))


def _synthetic_kappa(psf: str, n_pairs: int = 60) -> float:
    """κ from pairs of corners blurred with known radii ρ, laid out as one image per pair."""
    rng = np.random.default_rng(3)
    side = 9 + 2 * MARGIN_PX + 4
    images, feats = {}, []
    for p in range(n_pairs):
        r_lo, r_hi = np.sort(rng.uniform(1.0, 3.0, 2))
        theta, off = rng.uniform(0, np.pi), rng.uniform(-0.5, 0.5, 2)
        a = _corner(r_hi, theta, off, side, psf)
        b = _corner(r_lo, theta, off, side, psf)
        images[p] = np.hstack([a, b])
        c = (side - 1) / 2
        feats.append(_features([p, p], [0, 1], [0, 0], [-r_hi, -r_lo], [0, 0], u=np.array([c, c + side]), v=np.array([c, c])))
    return calibrate_kappa(images, BapFeatures.concatenate(feats), LAYOUT).kappa


def test_gaussian_psfs_give_kappa_one_half():
    """σ = ρ/2 Gaussian PSFs: eq:relblur is exact, κ = 0.5 up to pixel sampling (sampled kernel)."""
    assert _synthetic_kappa("gauss") == pytest.approx(0.5, abs=0.04)


def test_disc_psfs_give_a_larger_kappa_than_their_standard_deviation():
    """Uniform discs (σ = ρ/2 in second moment): the L2-best Gaussian relative blur is wider.

    A disc's edge profile is steeper at its centre than the Gaussian of the same variance (slope
    2/(πρ) vs 1/(σ√(2π)); equal slopes at σ = 0.63ρ), so Θ(κ) is minimal at κ ≈ 0.56, not 0.5.
    """
    k = _synthetic_kappa("disc")
    assert 0.53 < k < 0.60


def test_kappa_on_ray_traced_r12a_frames(traced_r12a):
    """Ray-traced disc PSFs (σ/ρ = 0.5 in second moment) give κ ≈ 0.6 (see the disc test and central_features)."""
    camera, images, feats = traced_r12a
    eligible = central_features(camera, feats, default_max_offset_px(camera))
    res = calibrate_kappa(images, feats, camera.mla.types, eligible=eligible)
    assert res.n_pairs > 100
    assert 0.55 < res.kappa < 0.72
    assert not res.at_bound
    assert res.spread["std"] < 0.06
    assert len(res.per_frame) >= 5 and sum(f.n_pairs for f in res.per_frame.values()) == res.n_pairs
    # Adding blur explains the sharper views: the cost drops by > 30 %.
    assert res.cost < 0.77 * res.cost_no_blur
    # Without the central selection, windows reach the dark gaps and κ runs away.
    wild = calibrate_kappa(images, feats, camera.mla.types)
    assert wild.kappa > 1.0


def test_bad_inputs_name_the_problem(traced_r12a):
    camera, images, feats = traced_r12a
    lone = _features([0], [0], [0], [-1.0], [0])
    with pytest.raises(DataError, match="no pair of BAP features of different micro-lens types"):
        calibrate_kappa(images, lone, LAYOUT)
    with pytest.raises(DataError, match="no image for frame 2"):
        calibrate_kappa({0: images[0], 1: images[1]}, feats, camera.mla.types)
    with pytest.raises(DataError, match="window must be a positive odd"):
        calibrate_kappa(images, feats, camera.mla.types, window=8)
