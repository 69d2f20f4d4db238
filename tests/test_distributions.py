"""plenocal._distributions gives scipy.stats's numbers (without importing scipy.stats)."""

import numpy as np
import pytest
from scipy import stats

from plenocal import _distributions as dist


@pytest.mark.parametrize("p", [1e-6, 1e-4, 1e-3, 0.05, 0.5, 0.9])
@pytest.mark.parametrize("dof", [1, 2, 3, 4, 7])
def test_chi2_matches_scipy_stats(p, dof):
    assert dist.chi2_isf(p, dof) == stats.chi2.isf(p, dof)
    assert dist.chi2_ppf(1.0 - p, dof) == stats.chi2.ppf(1.0 - p, dof)
    x = stats.chi2.isf(p, dof) * 0.9
    assert dist.chi2_sf(x, dof) == stats.chi2.sf(x, dof)


@pytest.mark.parametrize("q", [0.0, 1e-9, 0.013, 0.5, 1.0])
def test_beta_cdf_matches_scipy_stats(q):
    n = np.arange(1, 40)
    r = n // 2 + 1
    np.testing.assert_array_equal(dist.beta_cdf(q, r, n - r + 1), stats.beta.cdf(q, r, n - r + 1))


@pytest.mark.parametrize("p", [1e-3, 0.01, 0.2])
@pytest.mark.parametrize(("dfn", "dfd"), [(2, 1), (2, 4), (3, 10), (2, 200)])
def test_f_isf_matches_scipy_stats(p, dfn, dfd):
    assert dist.f_isf(p, dfn, dfd) == stats.f.isf(p, dfn, dfd)


@pytest.mark.parametrize("x", [-40.0, -6.5, -1.0, 0.0, 2.5])
def test_norm_cdf_matches_scipy_stats(x):
    assert dist.norm_cdf(x) == stats.norm.cdf(x)


def test_the_commands_do_not_import_scipy_stats():
    """The point of the module: scipy.stats costs 1.3 s of every command's start."""
    import subprocess
    import sys

    code = ("import sys, plenocal.cli.calibrate, plenocal.cli.evaluate, plenocal.cli.depth_scaling, "
            "plenocal.cli.precalibrate; print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
