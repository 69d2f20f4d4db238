"""White-image checks (precalib.checks): over-exposure, an undeclared Bayer mosaic, JPEG blocks,
f-numbers swapped or mislabelled. Each refuses ``plenocal precalibrate`` with one line naming the
white and what to do, nothing written, the inputs unchanged (the hostile promise); clean whites
pass. The whites are the analytic small-R12 ones (conftest), 8-bit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "cli"))
from promise import hostile
from test_cli import make_dataset

from plenocal.precalib import checks
from plenocal.precalib.pipeline import WhiteImage


def _grey(image: np.ndarray) -> np.ndarray:
    """The white as the pipeline reads an 8-bit PNG of it."""
    return np.clip(np.rint(image), 0, 255) / 255.0


def _jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", np.clip(np.rint(image), 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.imdecode(buf, cv2.IMREAD_UNCHANGED).astype(np.float64)


def _bayer(image: np.ndarray, gains=(0.55, 1.0, 0.7)) -> np.ndarray:
    """What an RGGB sensor records of a white diffuser with these channel gains."""
    out = image.astype(np.float64).copy()
    out[0::2, 0::2] *= gains[0]
    out[1::2, 1::2] *= gains[2]
    return out


def test_statistics_of_clean_and_damaged_whites(small_whites):
    """Clean whites: no plateau, phases within 0.3 %, no block edges; ×3 exposure: plateaus on the
    wide apertures; a Bayer mosaic: phases tens of % apart; JPEG at quality 75: block edges."""
    for w in small_whites:
        st = checks.white_statistics(_grey(w.image))
        assert st.clipped_plateau_fraction == 0.0
        assert st.mosaic_imbalance < 0.1 * checks.MAX_MOSAIC_IMBALANCE
        assert st.jpeg_coherence < checks.MIN_JPEG_COMB / 4
    over = {w.f_number: checks.clipped_plateau_fraction(_grey(3.0 * w.image)) for w in small_whites}
    assert min(over.values()) > 10 * checks.MAX_CLIPPED_PLATEAU_FRACTION
    assert all(checks.mosaic_imbalance(_grey(_bayer(w.image))) > 4 * checks.MAX_MOSAIC_IMBALANCE for w in small_whites)
    combs = [checks.jpeg_comb(_grey(_jpeg(w.image, 85))) for w in small_whites]
    assert min(c for c, _, _ in combs) > 2 * checks.MIN_JPEG_COMB and {q for _, q, _ in combs} == {4}


def test_jpeg_comb_is_its_definition(small_whites):
    """The compiled comb (one pass per step) gives the statistic as :data:`checks.MIN_JPEG_COMB`
    defines it, written out here in numpy: |mean exp(2πi c/Q)| of the coefficients |c| > Q/2, less
    the larger at Q ± ½, the best of five coefficients and Q = 2..16 (steps with < 200 coefficients
    or spread < 2Q skipped), on a clean and a JPEG-compressed white."""
    C = checks._dct8()
    for image in (_grey(small_whites[1].image), _grey(_jpeg(small_whites[1].image, 85))):
        a = image * 255.0
        H, W = a.shape[0] // 8 * 8, a.shape[1] // 8 * 8
        blocks = a[:H, :W].reshape(H // 8, 8, W // 8, 8).transpose(0, 2, 1, 3).reshape(-1, 8, 8)
        best = (0.0, 0, 0)
        for u, v in checks._JPEG_COEFFICIENTS:
            c = C[u] @ blocks @ C[v]
            for Q in range(2, 17):
                sel = c[np.abs(c) > Q / 2.0]
                if len(sel) < 200 or np.std(sel) < 2.0 * Q:
                    continue
                coh = abs(np.mean(np.exp(2j * np.pi * sel / Q)))
                near = max(abs(np.mean(np.exp(2j * np.pi * sel / (Q + h)))) for h in (-0.5, 0.5))
                if coh - near > best[0]:
                    best = (coh - near, Q, len(sel))
        got = checks.jpeg_comb(image)
        assert got[1:] == best[1:] and got[0] == pytest.approx(best[0], rel=1e-9, abs=1e-12)


def test_no_f_number_ratio_without_three_whites():
    assert np.isnan(checks.f_number_ratios({}, {}, [8.0, 16.0], 3)[8.0])


@pytest.fixture
def whites(small_whites):
    """The four whites that enter Ω (f/4 touches), a list to change."""
    return [w for w in small_whites if w.f_number > 4.5]


def _dataset(tmp_path, camera, whites, **manifest):
    ds = make_dataset(tmp_path / "ds", camera, whites)
    if manifest:
        path = ds / "manifest.json"
        doc = json.loads(path.read_text())
        for key, value in manifest.items():
            doc.setdefault(key, {}).update(value)
        path.write_text(json.dumps(doc))
    return ds


def _refused(capfd, tmp_path, ds, match):
    return hostile(capfd, ["precalibrate", ds, "-o", tmp_path / "pre"], inputs=[ds], out=tmp_path / "pre", match=match)


def test_over_exposed_white(capfd, tmp_path, small_camera, whites):
    """Exposed 3× and clipped (issue 25: Ω's m 17.6 % too large, no warning)."""
    ds = _dataset(tmp_path, small_camera, [WhiteImage(w.f_number, 3.0 * w.image, w.name) for w in whites])
    _refused(capfd, tmp_path, ds, r"white image images/white-5.65685.png is over-exposed: \d+\.\d % of its lit pixels "
                                  r"sit on clipped plateaus .*shorter exposure")


def test_mislabelled_f_number(capfd, tmp_path, small_camera, whites):
    """The f/11.31 white declared f/8 (issue 25: pitches −4σ, no warning): with four whites in Ω the
    one without which the others agree is named."""
    by_n = {round(w.f_number, 2): w for w in whites}
    relabelled = [by_n[5.66], WhiteImage(8.0, by_n[11.31].image), by_n[11.31], by_n[16.0]]
    ds = _dataset(tmp_path, small_camera, relabelled)
    _refused(capfd, tmp_path, ds, r"white image images/white-8.png is declared f/8 but its micro-images, against the "
                                  r"radius law of the other whites, say f/11\.\d \(\+4\d %\), allowed 10 %; check its f_number")


def test_mislabelled_f_number_among_three(capfd, tmp_path, small_camera, whites):
    """With three whites in Ω any one could be the wrong one: the line says what each says."""
    by_n = {round(w.f_number, 2): w for w in whites}
    ds = _dataset(tmp_path, small_camera, [by_n[5.66], WhiteImage(8.0, by_n[11.31].image), by_n[16.0]])
    _refused(capfd, tmp_path, ds, r"do not follow one radius law with their declared f-numbers: against the law of the "
                                  r"others, images/white-5.65685.png \(declared f/5.65685\) says f/.*; an f_number in "
                                  r"manifest.json is wrong \(add a fourth white to tell which\)")


def test_swapped_f_numbers(capfd, tmp_path, small_camera, small_whites):
    """The f/4 and f/16 labels swapped: the line says which whites are out of order and why (it was
    a 900-character line blaming touching micro-images)."""
    by_n = {round(w.f_number, 2): w for w in small_whites}
    swapped = [WhiteImage(4.0, by_n[16.0].image), by_n[5.66], by_n[8.0], by_n[11.31], WhiteImage(16.0, by_n[4.0].image)]
    ds = _dataset(tmp_path, small_camera, swapped)
    line = _refused(capfd, tmp_path, ds, r"white images images/white-4.png \(declared f/4\) and images/white-5.65685.png "
                                         r"\(declared f/5.65685\) are in the wrong order: .*mislabelled or the files swapped")
    assert "touch" not in line


def test_undeclared_bayer_mosaic(capfd, tmp_path, small_camera, whites):
    ds = _dataset(tmp_path, small_camera, [WhiteImage(w.f_number, _bayer(w.image), w.name) for w in whites])
    _refused(capfd, tmp_path, ds, r"white image images/white-5.65685.png has a 2x2 pixel pattern: .*Bayer colour mosaic "
                                  r"read as grey; set manifest.json image_format.color to \"bayer-rggb\"")


def test_jpeg_compressed_whites(capfd, tmp_path, small_camera, whites):
    ds = _dataset(tmp_path, small_camera, [WhiteImage(w.f_number, _jpeg(w.image, 75), w.name) for w in whites])
    _refused(capfd, tmp_path, ds, r"white image images/white-.*\.png went through JPEG compression: .*8x8 blocks.*PNG or TIFF")


def test_f_numbers_are_compared_on_the_lenses_every_white_has():
    """A real lens: the lenslets' blur grows across the field and each aperture's conforming region
    differs (here f/4's is half the others'). Over each white's own micro-images the law disagrees
    with itself (f/4 +20 %, f/5.66 −14 %, f/11.31 no f-number); over the micro-images all whites
    share it holds exactly."""
    from types import SimpleNamespace

    rng = np.random.default_rng(0)
    n = 4000
    k, l = rng.permutation(n), np.zeros(n, dtype=np.int64)
    r = k / n  # field position 0 … 1
    m2, used = 400.0, [4.0, 5.66, 8.0, 11.31]
    moments, types = {}, {}
    for N in used:
        own = r < (0.5 if N == 4.0 else 1.0)
        var = (m2 / N**2 + 20.0 + 40.0 * r[own] ** 2) / 4.0  # 4σ² = m²/N² + b(r)
        moments[N] = SimpleNamespace(k=k[own], l=l[own], variance_px2=var)
        types[N] = np.zeros(own.sum(), dtype=np.int64)
    ratios = checks.f_number_ratios(moments, types, used, 1)
    assert max(abs(v - 1.0) for v in ratios.values()) < 1e-3
    old = checks.MIN_COMMON_MICRO_IMAGES
    try:
        checks.MIN_COMMON_MICRO_IMAGES = n + 1  # each white's own micro-images, as before
        assert abs(checks.f_number_ratios(moments, types, used, 1)[4.0] - 1.0) > 0.15
    finally:
        checks.MIN_COMMON_MICRO_IMAGES = old


def _law_whites(labels_and_true, *, m2=400.0, b=20.0, scale_of=None, n=2000):
    """Per declared f-number, micro-images whose 4σ² follows m²/N_true² + b (× scale_of[N])."""
    from types import SimpleNamespace

    k, l = np.arange(n), np.zeros(n, dtype=np.int64)
    moments, types = {}, {}
    for declared, true in labels_and_true:
        y = (m2 / true**2 + b) * (scale_of or {}).get(declared, 1.0)
        moments[declared] = SimpleNamespace(k=k, l=l, variance_px2=np.full(n, y / 4.0))
        types[declared] = np.zeros(n, dtype=np.int64)
    return moments, types


def test_a_white_the_aperture_hardly_shapes_is_left_out_not_refused():
    """A slow white whose micro-images the micro-lenses' blur sets (m²/N² 4 % of 4σ²) and which
    leaves the others' law by 5 % of its second moment ("no f-number", as the telephoto render's
    f/22.64 white) is left out of Ω with the reason; a white at f/8 that leaves the law, where the
    aperture makes 24 % of it, is refused — as is an f/8 white declared f/22.6 (its measured share
    24 %)."""
    Ns = [4.0, 5.66, 8.0, 11.31]
    names = {N: f"white-{N:g}.png" for N in [*Ns, 22.6, 16.0]}
    moments, types = _law_whites([(N, N) for N in [*Ns, 22.6]], scale_of={22.6: 0.95})
    out = checks.check_f_numbers(moments, types, [*Ns, 22.6], names, 1)
    assert list(out) == [22.6] and "says no f-number" in out[22.6] and "at most 4%" in out[22.6]
    assert checks.aperture_fractions(moments, types, [*Ns, 22.6], 1)[22.6] == pytest.approx(0.038, abs=0.002)
    moments, types = _law_whites([(N, N) for N in [4.0, 5.66, 11.31, 16.0, 8.0]], scale_of={8.0: 0.7})
    with pytest.raises(checks.WhiteImageError, match=r"white image white-8.png is declared f/8 but"):
        checks.check_f_numbers(moments, types, [4.0, 5.66, 8.0, 11.31, 16.0], names, 1)
    moments, types = _law_whites([(4.0, 4.0), (5.66, 5.66), (8.0, 8.0), (11.31, 11.31), (22.6, 8.0)])
    with pytest.raises(checks.WhiteImageError, match=r"white image white-22.6.png is declared f/22.6 but .* say f/8"):
        checks.check_f_numbers(moments, types, [4.0, 5.66, 8.0, 11.31, 22.6], names, 1)
