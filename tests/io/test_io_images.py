"""Raw image I/O: 8/16-bit PNG/TIFF, grey/RGB/Bayer RGGB, documented grey conversion."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from plenocal.errors import DataError, InputFileError
from plenocal.io import read_raw_image, write_raw_image


@pytest.mark.parametrize("ext", [".png", ".tif"])
@pytest.mark.parametrize("bits", [8, 16])
def test_grey_round_trip_exact(tmp_path: Path, ext: str, bits: int):
    rng = np.random.default_rng(1)
    full = 2**bits - 1
    ints = rng.integers(0, full + 1, (12, 17)).astype(np.uint8 if bits == 8 else np.uint16)
    p = write_raw_image(tmp_path / f"a{ext}", ints, bits)
    assert np.array_equal(read_raw_image(p, as_grey=False), ints)
    grey = read_raw_image(p)
    assert grey.dtype == np.float64 and grey.shape == (12, 17)
    np.testing.assert_array_equal(grey, ints / full)
    # floats in [0, 1] are quantised to the bit depth
    p2 = write_raw_image(tmp_path / f"b{ext}", ints / full, bits)
    assert np.array_equal(read_raw_image(p2, as_grey=False), ints)


def test_rgb_is_stored_as_rgb_and_converted_with_bt601(tmp_path: Path):
    rgb = np.zeros((4, 5, 3), np.uint16)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 60000, 1000, 30000
    p = write_raw_image(tmp_path / "c.png", rgb, 16)
    # OpenCV stores BGR: the file's first decoded channel is blue
    assert cv2.imread(str(p), cv2.IMREAD_UNCHANGED)[0, 0, 0] == 30000
    assert np.array_equal(read_raw_image(p, as_grey=False), rgb)
    expected = (0.299 * 60000 + 0.587 * 1000 + 0.114 * 30000) / 65535
    np.testing.assert_allclose(read_raw_image(p), expected, rtol=1e-15)


def test_bayer_rggb_flat_colour(tmp_path: Path):
    mosaic = np.zeros((8, 10), np.uint8)
    mosaic[0::2, 0::2] = 200  # R
    mosaic[0::2, 1::2] = 100  # G
    mosaic[1::2, 0::2] = 100  # G
    mosaic[1::2, 1::2] = 30  # B
    p = write_raw_image(tmp_path / "bayer.png", mosaic, 8)
    grey = read_raw_image(p, color="bayer-rggb")
    inner = grey[2:-2, 2:-2]
    np.testing.assert_allclose(inner, (0.299 * 200 + 0.587 * 100 + 0.114 * 30) / 255, atol=1e-12)
    # read as plain grey, the mosaic is returned as stored
    np.testing.assert_array_equal(read_raw_image(p), mosaic / 255)


def test_image_errors(tmp_path: Path):
    with pytest.raises(InputFileError, match="image file does not exist"):
        read_raw_image(tmp_path / "x.png")
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    with pytest.raises(InputFileError, match=r"cannot decode image \(expected an 8- or 16-bit PNG or TIFF\)"):
        read_raw_image(bad)
    p = write_raw_image(tmp_path / "g.png", np.zeros((4, 6), np.uint8), 8)
    with pytest.raises(InputFileError, match="image declared rgb must have 3 channel"):
        read_raw_image(p, color="rgb")
    with pytest.raises(InputFileError, match="image size 6x4 px does not match the camera 6x5 px"):
        read_raw_image(p, expected_shape=(5, 6))
    with pytest.raises(DataError, match="dtype uint16 cannot be written at 8 bits"):
        write_raw_image(tmp_path / "h.png", np.zeros((4, 6), np.uint16), 8)
    with pytest.raises(InputFileError, match=r"unsupported image extension '\.jpg'"):
        write_raw_image(tmp_path / "h.jpg", np.zeros((4, 6)), 8)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["bad.png", "g.png"]


def test_decoded_images_are_kept_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A file read again is not decoded again (``DECODED_CACHE_MB``), yet every read returns
    the file's current content as a fresh array: one rewritten in place with another image of the
    same size and name is decoded anew, and changing a returned array changes no later read."""
    from plenocal.io import images

    calls = []
    decode = cv2.imdecode
    monkeypatch.setattr(images.cv2, "imdecode", lambda *a: calls.append(1) or decode(*a))
    images._DECODED.clear()
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (9, 11)).astype(np.uint8)
    p = write_raw_image(tmp_path / "a.png", a, 8)
    first = read_raw_image(p, as_grey=False)
    first[:] = 0  # the caller's copy
    assert np.array_equal(read_raw_image(p, as_grey=False), a)
    np.testing.assert_array_equal(read_raw_image(p), a / 255)
    assert len(calls) == 1
    b = 255 - a
    write_raw_image(tmp_path / "a.png", b, 8)  # same name, size and (likely) time stamp
    assert np.array_equal(read_raw_image(p, as_grey=False), b)
    assert len(calls) == 2
    monkeypatch.setenv("PLENOCAL_DECODED_CACHE_MB", "0")  # keeps none
    images._DECODED.clear()
    read_raw_image(p)
    read_raw_image(p)
    assert len(calls) == 4
    # a budget of two images keeps the two read last
    monkeypatch.setenv("PLENOCAL_DECODED_CACHE_MB", str(2 * a.nbytes / 2**20))
    paths = [write_raw_image(tmp_path / f"c{i}.png", np.full((9, 11), i, np.uint8), 8) for i in range(3)]
    for q in paths:
        read_raw_image(q)
    n = len(calls)
    read_raw_image(paths[2])
    read_raw_image(paths[1])
    assert len(calls) == n
    read_raw_image(paths[0])
    assert len(calls) == n + 1
    images._DECODED.clear()


def test_an_image_read_once_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``keep=False`` (a depth sequence's frames) decodes without keeping; a kept one still serves."""
    from plenocal.io import images

    calls = []
    decode = cv2.imdecode
    monkeypatch.setattr(images.cv2, "imdecode", lambda *a: calls.append(1) or decode(*a))
    images._DECODED.clear()
    p = write_raw_image(tmp_path / "a.png", np.arange(99, dtype=np.uint8).reshape(9, 11), 8)
    read_raw_image(p, keep=False)
    read_raw_image(p, keep=False)
    assert len(calls) == 2
    read_raw_image(p)
    read_raw_image(p, keep=False)
    assert len(calls) == 3
    images._DECODED.clear()
