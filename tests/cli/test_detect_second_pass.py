"""What the first detection pass hands to the second (issue 24): the pupil ellipses it measured
from the white, read back instead of measured again, the same numbers; a broken or foreign file is
one line."""

from __future__ import annotations

import numpy as np
import pytest

from plenocal.cli.detect import _pupil_ellipses_again, _write_pupil_ellipses
from plenocal.errors import InputFileError
from plenocal.model.pupil_ellipse import PupilEllipses


def _ellipses(n: int = 50, seed: int = 2) -> PupilEllipses:
    rng = np.random.default_rng(seed)
    p = PupilEllipses.discs(n)
    far = rng.random(n) < 0.4
    offset = np.where(far[:, None], rng.normal(0.0, 0.3, (n, 2)), 0.0)
    matrix = np.where(far[:, None], p.matrix + rng.normal(0.0, 0.05, (n, 3)) * [1.0, 0.2, 1.0], p.matrix)
    return PupilEllipses(offset, matrix, far)


def _unmeasured():
    raise AssertionError("measured again although the first pass handed its ellipses over")


def test_handed_ellipses_are_the_measured_ones(tmp_path):
    p = _ellipses()
    _write_pupil_ellipses(tmp_path / "p.npz", p)
    q = _pupil_ellipses_again(tmp_path / "p.npz", len(p), _unmeasured)
    for name in ("offset_px", "matrix", "elliptical"):
        a, b = getattr(p, name), getattr(q, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


def test_without_a_handed_file_they_are_measured(tmp_path):
    p = _ellipses()
    assert _pupil_ellipses_again(tmp_path / "absent.npz", len(p), lambda: p) is p
    _write_pupil_ellipses(tmp_path / "p.npz", p)
    assert _pupil_ellipses_again(None, len(p), lambda: p) is p  # another pre-calibration: not used


@pytest.mark.parametrize("fault", ["grid", "broken", "key"])
def test_a_foreign_or_broken_file_is_one_line(tmp_path, fault):
    p = _ellipses()
    path = tmp_path / "p.npz"
    if fault == "broken":
        path.write_bytes(b"PK\x03\x04 not a zip")
    elif fault == "key":
        np.savez(path, offset_px=p.offset_px, elliptical=p.elliptical)
    else:
        _write_pupil_ellipses(path, p)
    with pytest.raises(InputFileError) as info:
        _pupil_ellipses_again(path, len(p) + (1 if fault == "grid" else 0), _unmeasured)
    line = str(info.value)
    assert "\n" not in line and "p.npz" in line and "run the first pass again" in line


def test_lone_links_read_back_or_one_line(tmp_path):
    """A first pass's lone_links (node, u, v per linked point of a refused frame's lone lattice):
    read back as written; a broken one (not triples, a node off the board or not an integer, a
    non-finite position, none) is one line naming the file."""
    from plenocal.cli.detect import _lone_links

    where = tmp_path / "detection.json"
    good = [[3, 101.5, 202.25], [7, 90.0, 80.0]]
    np.testing.assert_array_equal(_lone_links(good, where, 5, 45), np.array(good))
    for bad in ([[3, 101.5]], [[45, 1.0, 2.0]], [[-1, 1.0, 2.0]], [[2.5, 1.0, 2.0]], [[3, float("nan"), 2.0]], [], "x", None):
        with pytest.raises(InputFileError) as info:
            _lone_links(bad, where, 5, 45)
        line = str(info.value)
        assert "\n" not in line and "detection.json" in line and "frame 5's lone_links" in line and "run the first pass again" in line
