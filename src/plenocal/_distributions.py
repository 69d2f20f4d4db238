"""The few distribution functions plenocal uses, from :mod:`scipy.special`.

``import scipy.stats`` costs 1.3 s of every command's start (it builds every distribution's
docstring); these are the formulas scipy.stats evaluates for the same calls (scipy 1.17's
``chi2_gen``, ``beta_gen``, ``f_gen``, ``norm_gen``), so the numbers are the same bytes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special


def chi2_isf(probability: float, dof: float) -> float:
    """χ²_dof's upper quantile: the x with P(χ²_dof > x) = ``probability`` (``chi2.isf``)."""
    return float(special.chdtri(dof, probability))


def chi2_ppf(quantile: float, dof: float) -> float:
    """χ²_dof's quantile: the x with P(χ²_dof ≤ x) = ``quantile`` (``chi2.ppf``)."""
    return float(2.0 * special.gammaincinv(dof / 2.0, quantile))


def chi2_sf(x: float, dof: float) -> float:
    """P(χ²_dof > x) (``chi2.sf``)."""
    return float(special.chdtrc(dof, x))


def beta_cdf(x: float, a: ArrayLike, b: ArrayLike) -> NDArray[np.float64]:
    """The regularised incomplete beta function I_x(a, b), x in [0, 1] (``beta.cdf``)."""
    return np.asarray(special.betainc(a, b, x), dtype=np.float64)


def f_isf(probability: float, dfn: float, dfd: float) -> float:
    """F(dfn, dfd)'s upper quantile (``f.isf``: its ppf at 1 − probability)."""
    return float(special.fdtri(dfn, dfd, 1.0 - probability))


def norm_cdf(x: float) -> float:
    """The standard normal distribution function (``norm.cdf``)."""
    return float(special.ndtr(x))


MAD_TO_SIGMA = 1.4826
"""σ of a zero-mean Gaussian per median absolute value (1/Φ⁻¹(3/4))."""


def robust_scale(values: NDArray[np.float64]) -> float:
    """1.4826 × median |value| (about zero: a Gaussian's σ when the values are its draws); NaN for
    no values.

    >>> robust_scale(np.array([-1.0, 1.0, 100.0]))
    1.4826
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    return float(MAD_TO_SIGMA * np.median(np.abs(v))) if v.size else float("nan")
