"""The white images against what the dataset declares: exposure, mosaic, compression, f-numbers.

Pre-calibration measures the micro-image grid and the radius law Ω from the white images, and
everything downstream inherits their errors: clipped whites put Ω's m 17.6 % too large (issue 25:
d +20 %, f_i +18 % after calibration), a white whose f-number is mislabelled moves the law's slope,
a Bayer mosaic read as grey or JPEG blocks move the micro-image centres. None of these changes an
RMSE. Each check here is a statistic of the white images (or of their micro-image moments) with a
named bound, measured on plenocal's own simulated whites and on the independent PRISM and
real-optics whites (``../shared/validation``); a failed check refuses pre-calibration with one line
naming the image, the statistic and what to do (:class:`WhiteImageError`).

:func:`check_white_images` runs on the images before anything is measured (mosaic, JPEG);
:func:`check_aperture_order` on the micro-image moments of every white; :func:`check_used_whites`
on the whites that enter Ω, once Ω is fitted (exposure, then f-numbers).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError
from plenocal.model.lattice import lens_keys
from plenocal.precalib._kernels import comb_sums_kernel

FloatArray = NDArray[np.float64]

LIT_FRACTION_OF_BRIGHT = 0.5
"""A pixel is *lit* (inside a micro-image's bright part) above this fraction of the image's 99th
percentile."""

MAX_CLIPPED_PLATEAU_FRACTION = 0.01
"""Largest fraction of lit pixels whose whole 3 × 3 neighbourhood sits at the full-scale code, in
a white that enters Ω: clipped *plateaus*, where over-exposure has flattened the micro-images' tops
and biased their second moments. Isolated full-scale pixels (noise reaching the top) do not count:
the independent whites have many (PRISM r12-b f/4: 23 % of lit pixels at 255, real-optics f/11.31:
14 %) and pre-calibrate well, but few plateaus (PRISM's whites that enter Ω ≤ 0.09 %, the
real-optics set's ≤ 0.01 %, plenocal's simulated whites 0). Whites exposed 3× and clipped on a
simulated R12-A crop: 40, 24 and 2.8 % at f/4, f/5.66 and f/8, and Ω's m +17.9 % (issue 25: +17.6 %);
1.3×: 5.3 % at f/4 only, which touches and stays out of Ω (m +0.1 %). PRISM's f/4 white (8.3 %)
stays out of Ω too: whites left out are not judged."""

MAX_MOSAIC_IMBALANCE = 0.05
"""Largest relative spread (max − min)/mean of the mean lit intensity of the four 2 × 2 pixel
phases. A grey sensor's phases agree to the photo-response non-uniformity averaged over ~10⁵
pixels (measured ≤ 0.4 % on every white above); a Bayer mosaic read as grey shows its colour
channels' gains (27–50 % for R, G, B gains of 0.55 / 1 / 0.7 under a white diffuser)."""

MIN_JPEG_COMB = 0.10
"""JPEG stores each 8 × 8 block's DCT coefficients as multiples of a quantisation step Q; decoded,
an image keeps them within ±0.3 DN of those multiples. The statistic (:func:`jpeg_comb`) is the
phase coherence |mean exp(2πi c/Q)| of the low-frequency AC coefficients c (away from 0), less the
same at Q ± ½ (a distribution merely concentrated near 0 is coherent at every Q), the largest over
five coefficients and Q = 2..16. Never-compressed whites: ≤ 0.055 (plenocal's simulated 1000 × 800
crops), ≤ 0.005 (PRISM r12-b, real-optics r12-b, analytic whites ≤ 0.017); JPEG at quality 85, the
largest over a set's whites: 0.14 (PRISM), 0.24 (real-optics), 0.27 (simulated crop), 0.73 (analytic);
at 75 similar or more. Quality 95 (Q ≈ 1–2 DN) is not seen (≤ 0.03)."""

MIN_JPEG_COMB_Z = 10.0
"""...and the coherence must also be this many times its chance level 1/√n (n coefficients used),
so that a few hundred blocks cannot reach the bound by chance."""

ORDER_TOLERANCE_SE = 5.0
"""The micro-images of a white at a larger f-number must not be larger than those of one at a
smaller f-number (the main-aperture disc is |m|/N): a per-type median second moment larger by more
than this many standard errors of the difference means the f-numbers are mislabelled or the files
swapped."""

MAX_F_NUMBER_RATIO_ERROR = 0.10
"""Largest relative difference between a white's declared f-number and the one its micro-images
imply through the radius law fitted to the other whites that enter Ω (leave one white out; three
needed): 4σ²(N) = m²/N² + b_i per type i, so N = |m|/√(4σ² − b_i). Correctly labelled whites:
≤ 0.6 % (simulated R12-A crop, 16 rays), ≤ 0.2 % (PRISM r12-b), ≤ 5.3 % (the real-optics set: a
thick, vignetting lens, its f/11.31 white extrapolated from f/5.66 and f/8), 4.4 % with an undeclared
Bayer mosaic. Mislabelled by a full, half or third stop: 41, 19, 12 %. JPEG (quality 85) and 3×
over-exposure move it by up to 24 % and 17 %: those are checked first."""

MIN_COMMON_MICRO_IMAGES = 500
"""The whites' radius law is compared on the micro-images that conform in every white compared
(the same lenses at every f-number) when at least this many do; otherwise each white's own. On a
real lens the conforming region changes with the aperture and the lenslets' blur changes across
the field (docs/model.md, "Real micro-lenses"), so medians over different regions disagree by
themselves: plenocal's telephoto render, its f/4 white vignetted by the front element, named no
single culprit on each white's own micro-images (without f/4: f/5.66 −23 %, f/11.31 +71 %) and
names f/4 (+34 %) on the 11 203 common ones (the others then within 8.4 %)."""


MIN_APERTURE_FRACTION = 0.10
"""A white named by :func:`check_f_numbers` whose micro-images' second moment the aperture term
m²/N² makes less than this share of (by the law of the other whites) is left out of Ω instead of
refused: at such an aperture the micro-lenses' blur sets the micro-images, a few per cent of misfit
of the law there is a ≥ 10 % error of the implied f-number, and the white carries almost nothing of
m. plenocal's telephoto render (real micro-lenses, whites f/5.66–22.64; shares 56 / 37 / 24 / 15 /
6 %): the f/22.64 white says "no f-number" against the others (its second moment below their
law's intercept); it was refused ("check its f_number ... or whether the lens vignettes"), neither
of which was the case, and is now left out (Ω's m −130.0 µm from the other four). A mislabelled
white is caught where its label matters: the small R12-A's f/11.31 white declared f/8 (+41 % off)
is 32 % aperture, and refused."""


class WhiteImageError(DataError):
    """A white image fails a check: the one line names it, the statistic and what to do."""


@dataclass(frozen=True)
class WhiteStatistics:
    """The image statistics of one white (:func:`white_statistics`)."""

    clipped_plateau_fraction: float
    mosaic_imbalance: float
    jpeg_coherence: float
    """:func:`jpeg_comb`'s coherence."""
    jpeg_step: int
    jpeg_n: int


def _lit(image: FloatArray) -> NDArray[np.bool_]:
    sub = image[:: max(1, image.shape[0] // 512), :: max(1, image.shape[1] // 512)]
    return image > LIT_FRACTION_OF_BRIGHT * float(np.percentile(sub, 99))


def clipped_plateau_fraction(image: FloatArray, lit: NDArray[np.bool_] | None = None) -> float:
    """Fraction of lit pixels whose 3 × 3 neighbourhood is entirely at full scale (1.0).

    Parameters
    ----------
    image : ndarray, shape (H, W)
        Grey in [0, 1] (1.0 = the stored full-scale code, :func:`plenocal.io.images.read_raw_image`).
    """
    img = np.asarray(image)
    lit = _lit(img) if lit is None else lit
    full = img >= 1.0
    plateau = full[1:-1, 1:-1].copy()
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            plateau &= full[1 + dy : img.shape[0] - 1 + dy, 1 + dx : img.shape[1] - 1 + dx]
    n_lit = int(lit[1:-1, 1:-1].sum())
    return float(plateau.sum()) / n_lit if n_lit else 0.0


def mosaic_imbalance(image: FloatArray, lit: NDArray[np.bool_] | None = None) -> float:
    """(max − min)/mean of the mean lit intensity of the four 2 × 2 pixel phases."""
    img = np.asarray(image)
    lit = _lit(img) if lit is None else lit
    means = []
    for dy in (0, 1):
        for dx in (0, 1):
            sel = lit[dy::2, dx::2]
            if not sel.any():
                return 0.0
            means.append(float(img[dy::2, dx::2][sel].mean()))
    m = np.asarray(means)
    return float((m.max() - m.min()) / m.mean()) if m.mean() > 0 else 0.0


_JPEG_COEFFICIENTS = ((0, 1), (1, 0), (1, 1), (0, 2), (2, 0))
"""Low-frequency AC coefficients examined (their steps are the smallest, yet above the rounding
noise from quality ~90 down)."""


def _dct8() -> FloatArray:
    """The orthonormal 8-point DCT-II matrix (JPEG's)."""
    k = np.arange(8)
    c = np.sqrt(2.0 / 8.0) * np.cos(np.pi * (2 * k[None, :] + 1) * k[:, None] / 16.0)
    c[0] /= np.sqrt(2.0)
    return c


def jpeg_comb(image: FloatArray) -> tuple[float, int, int]:
    """JPEG quantisation comb of an image (:data:`MIN_JPEG_COMB`): (coherence, Q, n).

    Parameters
    ----------
    image : ndarray, shape (H, W)
        Grey in [0, 1]; examined on the 8-bit scale (×255) in the 8 × 8 blocks aligned with pixel
        (0, 0), as a camera's JPEG writer lays them.

    Returns
    -------
    coherence : float
        The largest coherence at a step Q, less the larger of the same at Q ± ½.
    Q : int
        The step (DN of the 8-bit scale) where it was found (0: none examined).
    n : int
        The number of coefficients it was measured on.
    """
    a = np.asarray(image, dtype=np.float64) * 255.0
    H, W = a.shape[0] // 8 * 8, a.shape[1] // 8 * 8
    blocks = a[:H, :W].reshape(H // 8, 8, W // 8, 8).transpose(0, 2, 1, 3).reshape(-1, 8, 8)
    C = _dct8()
    # coefficient (u, v) of every block: Σ_ij C[u, i]·block[i, j]·C[v, j], the five at once
    coefficients = blocks.reshape(-1, 64) @ np.stack([np.outer(C[u], C[v]).ravel() for u, v in _JPEG_COEFFICIENTS], axis=1)
    steps = np.arange(2, 17, dtype=np.float64)
    best = (0.0, 0, 0)
    for c in coefficients.T:
        # per step Q: the coefficients away from 0 (|c| > Q/2), their spread and their phases'
        # sums at Q and Q ± ½ (one pass each, compiled: 2.2 s a full-scale white in numpy)
        sums = comb_sums_kernel(np.ascontiguousarray(c), steps)
        for Q, (n, s1, s2, c0, z0, c1, z1, c2, z2) in zip(range(2, 17), sums, strict=True):
            if n < 200 or np.sqrt(max(s2 / n - (s1 / n) ** 2, 0.0)) < 2.0 * Q:
                continue
            coh = np.hypot(c1, z1) / n
            near = max(np.hypot(c0, z0), np.hypot(c2, z2)) / n
            if coh - near > best[0]:
                best = (float(coh - near), Q, int(n))
    return best


def white_statistics(image: FloatArray) -> WhiteStatistics:
    """Every image statistic of one white (grey, [0, 1])."""
    img = np.asarray(image, dtype=np.float64)
    lit = _lit(img)
    return WhiteStatistics(clipped_plateau_fraction(img, lit), mosaic_imbalance(img, lit), *jpeg_comb(img))


def check_white_images(whites: Sequence[tuple[str, FloatArray]], *, color: str = "grey") -> dict[str, WhiteStatistics]:
    """Refuse an undeclared Bayer mosaic (:data:`MAX_MOSAIC_IMBALANCE`, only for images declared
    grey) and JPEG-compressed whites (:data:`MIN_JPEG_COMB`, :data:`MIN_JPEG_COMB_Z`),
    before anything is measured on them; return every white's statistics (exposure is judged
    once Ω says which whites it uses: :func:`check_used_whites`).

    Parameters
    ----------
    whites : sequence of (name, image)
        Each white as the pipeline reads it: grey, float in [0, 1].
    color : str
        The manifest's ``image_format.color``.

    Raises
    ------
    WhiteImageError
    """
    out: dict[str, WhiteStatistics] = {}
    for name, image in whites:
        st = white_statistics(image)
        out[name] = st
        if color == "grey" and st.mosaic_imbalance > MAX_MOSAIC_IMBALANCE:
            raise WhiteImageError(
                f"white image {name} has a 2x2 pixel pattern: its four pixel phases differ by "
                f"{100 * st.mosaic_imbalance:.0f} % in brightness (a grey sensor: < {100 * MAX_MOSAIC_IMBALANCE:g} %), "
                "the mark of a Bayer colour mosaic read as grey; set manifest.json image_format.color to "
                "\"bayer-rggb\" (or give demosaiced images)")
        if st.jpeg_coherence > MIN_JPEG_COMB and st.jpeg_coherence * np.sqrt(st.jpeg_n) > MIN_JPEG_COMB_Z:
            raise WhiteImageError(
                f"white image {name} went through JPEG compression: its 8x8 blocks' DCT coefficients sit on "
                f"multiples of {st.jpeg_step} (coherence {st.jpeg_coherence:.2f}, never-compressed images < "
                f"{MIN_JPEG_COMB:g}), which moves micro-image centres and radii; give the camera's raw images "
                "(PNG or TIFF, never saved as JPEG on the way)")
    return out


def check_exposure(statistics: Mapping[float, WhiteStatistics], used: Sequence[float], names: Mapping[float, str]) -> None:
    """Refuse a white that enters Ω with clipped plateaus (:data:`MAX_CLIPPED_PLATEAU_FRACTION`).
    Whites left out of Ω (touching micro-images) may clip: PRISM's f/4 white does (8 % plateau)."""
    for N in used:
        st = statistics.get(N)
        if st is not None and st.clipped_plateau_fraction > MAX_CLIPPED_PLATEAU_FRACTION:
            raise WhiteImageError(
                f"white image {names[N]} is over-exposed: {100 * st.clipped_plateau_fraction:.1f} % of its lit pixels sit "
                f"on clipped plateaus at the full-scale code (allowed {100 * MAX_CLIPPED_PLATEAU_FRACTION:g} %), which "
                "flattens the micro-images and biases the radius law; take it again with a shorter exposure (the "
                "brightest micro-images below full scale) or leave it out of manifest.json")


def check_used_whites(statistics: Mapping[float, WhiteStatistics], moments: Mapping[float, object],
                      types: Mapping[float, NDArray[np.int64]], used: Sequence[float], names: Mapping[float, str],
                      n_types: int) -> dict[float, str]:
    """The whites that enter Ω: exposure first (:func:`check_exposure`: clipping also moves the
    implied f-numbers, issue 25's 3× over-exposure by up to 17 %), then their f-numbers
    (:func:`check_f_numbers`); returns the whites to leave out of Ω, each with the reason."""
    check_exposure(statistics, used, names)
    return check_f_numbers(moments, types, used, names, n_types)


def _per_type_medians(variance_px2: FloatArray, types: NDArray[np.int64], n_types: int) -> tuple[FloatArray, FloatArray]:
    """Per type: median of the micro-images' second moments and its standard error (1.2533·σ/√n)."""
    med = np.full(n_types, np.nan)
    se = np.full(n_types, np.nan)
    for t in range(n_types):
        v = variance_px2[types == t]
        v = v[np.isfinite(v)]
        if len(v) >= 10:
            med[t] = float(np.median(v))
            mad = 1.4826 * float(np.median(np.abs(v - med[t])))
            se[t] = 1.2533 * mad / np.sqrt(len(v))
    return med, se


def check_aperture_order(moments: Mapping[float, object], types: Mapping[float, NDArray[np.int64]],
                         names: Mapping[float, str], n_types: int) -> None:
    """Refuse whites whose micro-images do not shrink as the declared f-number grows
    (:data:`ORDER_TOLERANCE_SE`): a white at N₁ < N₂ must have the larger micro-images of every
    type. Touching micro-images (truncated by their window) still obey the order.

    Parameters
    ----------
    moments : per declared f-number, :class:`plenocal.precalib.radii.Moments`
    types : per f-number, the type index of each micro-image (shape (M,))
    names : per f-number, the white's file name (for the message)
    n_types : I (0 is one type)
    """
    nt = max(n_types, 1)
    stats = {N: _per_type_medians(np.asarray(moments[N].variance_px2), np.clip(types[N], 0, None), nt)  # type: ignore[attr-defined]
             for N in moments}
    Ns = sorted(stats)
    for a, b in itertools.pairwise(Ns):
        (ma, sa), (mb, sb) = stats[a], stats[b]
        excess = (mb - ma) / np.hypot(sa, sb)
        if np.any(np.isfinite(excess) & (excess > ORDER_TOLERANCE_SE)):
            ra, rb = 2.0 * np.sqrt(np.nanmedian(ma)), 2.0 * np.sqrt(np.nanmedian(mb))
            raise WhiteImageError(
                f"white images {names[a]} (declared f/{a:g}) and {names[b]} (declared f/{b:g}) are in the wrong "
                f"order: the micro-images at f/{b:g} are larger (RMS radius {rb:.2f} px against {ra:.2f} px), but "
                "a smaller aperture (larger f-number) makes them smaller; the f-numbers in manifest.json are "
                "mislabelled or the files swapped")


def f_number_ratios(moments: Mapping[float, object], types: Mapping[float, NDArray[np.int64]],
                    used: Sequence[float], n_types: int) -> dict[float, float]:
    """Per used white, N_implied / N_declared from the radius law fitted to the other used whites
    (leave one out; :data:`MAX_F_NUMBER_RATIO_ERROR`), on the micro-images every used white has
    (:data:`MIN_COMMON_MICRO_IMAGES`). Needs three used whites (NaN otherwise).

    The law per type i: y = 4σ²(N) = m²·(1/N²) + b_i, linear in (m², b_1..b_I), fitted to the per-type
    median second moments; the left-out white's implied 1/N² is the count-weighted mean over types
    of (y_i − b_i)/m².
    """
    return {N: v[0] for N, v in _left_out_law(moments, types, used, n_types).items()}


def aperture_fractions(moments: Mapping[float, object], types: Mapping[float, NDArray[np.int64]],
                       used: Sequence[float], n_types: int) -> dict[float, float]:
    """Per used white, the share of its micro-images' second moment that the aperture makes by the
    law of the other whites (:data:`MIN_APERTURE_FRACTION`; NaN with fewer than three whites): the
    larger of the measured share, mean over types of (y_i − b_i)/y_i, and the share the law gives at
    the declared f-number, (m²/N²)/(m²/N² + b_i) — so that a fast white declared slow (large
    measured) and a slow one declared fast (large declared) both count as shaped by the aperture."""
    return {N: v[1] for N, v in _left_out_law(moments, types, used, n_types).items()}


def _left_out_law(moments: Mapping[float, object], types: Mapping[float, NDArray[np.int64]],
                  used: Sequence[float], n_types: int) -> dict[float, tuple[float, float]]:
    """Per used white (N_implied / N_declared, aperture fraction) against the law of the others."""
    nan = float("nan")
    nt = max(n_types, 1)
    if len(used) < 3:
        return {N: (nan, nan) for N in used}
    keys = {N: lens_keys(moments[N].k, moments[N].l) for N in used}  # type: ignore[attr-defined]
    common = functools.reduce(np.intersect1d, keys.values())
    sel = {N: (np.isin(keys[N], common) if len(common) >= MIN_COMMON_MICRO_IMAGES else np.ones(len(keys[N]), dtype=bool))
           for N in used}
    med = {N: _per_type_medians(np.asarray(moments[N].variance_px2)[sel[N]], np.clip(types[N][sel[N]], 0, None), nt)[0]  # type: ignore[attr-defined]
           for N in used}
    out: dict[float, tuple[float, float]] = {}
    for left in used:
        rest = [N for N in used if N != left]
        rows, ys = [], []
        for N in rest:
            for t in range(nt):
                if np.isfinite(med[N][t]):
                    r = np.zeros(1 + nt)
                    r[0], r[1 + t] = 1.0 / N**2, 1.0
                    rows.append(r)
                    ys.append(4.0 * med[N][t])
        sol, *_ = np.linalg.lstsq(np.asarray(rows), np.asarray(ys), rcond=None)
        m2, b = sol[0], sol[1:]
        y = 4.0 * med[left]
        ok = np.isfinite(y) & (y > 0)
        if m2 <= 0 or not ok.any():
            out[left] = (nan, nan)
            continue
        inv_n2 = float(np.mean((y[ok] - b[ok]) / m2))
        ratio = float(1.0 / np.sqrt(inv_n2)) / left if inv_n2 > 0 else float("inf")
        measured = float(np.mean((y[ok] - b[ok]) / y[ok]))
        declared = float(np.mean((m2 / left**2) / (m2 / left**2 + b[ok])))
        out[left] = (ratio, max(measured, declared))
    return out


def _off(r: float) -> float:
    return abs(r - 1.0) if np.isfinite(r) else np.inf


def check_f_numbers(moments: Mapping[float, object], types: Mapping[float, NDArray[np.int64]], used: Sequence[float],
                    names: Mapping[float, str], n_types: int) -> dict[float, str]:
    """Refuse whites whose micro-images do not follow one radius law with their declared
    f-numbers (:func:`f_number_ratios`, :data:`MAX_F_NUMBER_RATIO_ERROR`).

    With four whites or more in Ω, the mislabelled one is named: the white without which the
    others agree (each within the bound of the law fitted to the rest). With three, any one of them
    could be the wrong one (two whites alone fit the law whatever their labels): the line gives
    what each says against the other two. A named white whose micro-images the aperture hardly
    shapes (:data:`MIN_APERTURE_FRACTION`) is not refused but returned, f-number → the reason, to be
    left out of Ω: it carries almost nothing of m, and its label cannot be checked either.
    """
    ratios = f_number_ratios(moments, types, used, n_types)
    if all(_off(r) <= MAX_F_NUMBER_RATIO_ERROR for r in ratios.values() if not np.isnan(r)):
        return {}

    def says(N: float) -> str:
        r = ratios[N]
        return f"f/{N * r:.3g} ({100 * (r - 1):+.0f} %)" if np.isfinite(r) else "no f-number (micro-images smaller than the lens blur alone)"

    culprit = None
    if len(used) >= 4:
        spread = {L: max(_off(r) for r in f_number_ratios(moments, types, [N for N in used if N != L], n_types).values())
                  for L in used}
        L = min(spread, key=lambda k: spread[k])
        if spread[L] <= MAX_F_NUMBER_RATIO_ERROR:
            culprit = L
    if culprit is not None:
        share = aperture_fractions(moments, types, used, n_types)[culprit]
        if share < MIN_APERTURE_FRACTION:  # NaN (no law) is not below: refused
            return {culprit: (f"against the radius law of the other whites it says {says(culprit)}, but the "
                              f"aperture makes at most {max(share, 0.0):.0%} of its micro-images' second moment (below "
                              f"{MIN_APERTURE_FRACTION:.0%}): the micro-lenses' blur sets them, which the law does not "
                              "describe to that precision, and they carry almost nothing of m")}
        raise WhiteImageError(
            f"white image {names[culprit]} is declared f/{culprit:g} but its micro-images, against the radius law of the "
            f"other whites, say {says(culprit)}, allowed {100 * MAX_F_NUMBER_RATIO_ERROR:g} %; check its f_number in "
            "manifest.json, or whether the lens vignettes at that aperture (an element other than the stop clipping "
            "the beam): then its frames see another aperture than declared; use an aperture where it does not")
    each = "; ".join(f"{names[N]} (declared f/{N:g}) says {says(N)}" for N in sorted(ratios))
    raise WhiteImageError(
        f"the white images' micro-images do not follow one radius law with their declared f-numbers: against the "
        f"law of the others, {each} (allowed {100 * MAX_F_NUMBER_RATIO_ERROR:g} %); an f_number in manifest.json is "
        "wrong (add a fourth white to tell which)" if len(used) < 4 else
        f"the white images' micro-images do not follow one radius law with their declared f-numbers: against the "
        f"law of the others, {each} (allowed {100 * MAX_F_NUMBER_RATIO_ERROR:g} %); check the f_numbers in manifest.json")


__all__ = [
    "MAX_CLIPPED_PLATEAU_FRACTION",
    "MAX_F_NUMBER_RATIO_ERROR",
    "MAX_MOSAIC_IMBALANCE",
    "MIN_APERTURE_FRACTION",
    "MIN_COMMON_MICRO_IMAGES",
    "MIN_JPEG_COMB",
    "MIN_JPEG_COMB_Z",
    "ORDER_TOLERANCE_SE",
    "WhiteImageError",
    "WhiteStatistics",
    "aperture_fractions",
    "check_aperture_order",
    "check_exposure",
    "check_f_numbers",
    "check_used_whites",
    "check_white_images",
    "clipped_plateau_fraction",
    "f_number_ratios",
    "jpeg_comb",
    "mosaic_imbalance",
    "white_statistics",
]
