"""Raw image I/O: 8/16-bit PNG or TIFF, grey, RGB or Bayer RGGB (``docs/formats.md``).

Conversion to grey (the only form the pipeline uses), documented once here:

- **grey** images are taken as they are;
- **RGB** images: ``Y = 0.299·R + 0.587·G + 0.114·B`` (ITU-R BT.601, OpenCV's weights), in
  floating point (no rounding);
- **Bayer RGGB** mosaics (one channel, R at pixel (0, 0), G at (1, 0) and (0, 1), B at (1, 1)):
  bilinear demosaicing (OpenCV ``COLOR_BayerBG2RGB``, which is OpenCV's name for this layout) to
  RGB at the stored bit depth, then the BT.601 weights above.

Grey images are returned as float64 in [0, 1]: the stored value divided by 2^bit_depth − 1
(255 or 65535). ``as_grey=False`` returns the stored integers (RGB channel order, never BGR).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Literal

import cv2
import numpy as np
from numpy.typing import NDArray

from plenocal.errors import DataError, InputFileError
from plenocal.io._quiet import captured_stderr, first_line
from plenocal.io.atomic import atomic_write_bytes

Color = Literal["grey", "rgb", "bayer-rggb"]
COLORS: tuple[str, ...] = ("grey", "rgb", "bayer-rggb")
GREY_WEIGHTS = (0.299, 0.587, 0.114)
_SUFFIXES = {".png": ".png", ".tif": ".tiff", ".tiff": ".tiff"}

DECODED_CACHE_MB = 512
"""Decoded images a process keeps (MB of stored integers, least recently read dropped first;
``PLENOCAL_DECODED_CACHE_MB`` overrides it, 0 keeps none). The stages of ``plenocal run`` read
the same files several times — the whites in pre-calibration and detection, the checkerboards in
both detection passes, the blur and the depth scaling — and decoding a full-scale R12 PNG takes
0.1–0.15 s, hashing its bytes 6 ms. Keyed by the file's content (SHA-256 of its bytes), so a file
rewritten in place is decoded again whatever its name, size or time stamps."""


class _DecodedImages:
    """The decoded arrays of :data:`DECODED_CACHE_MB`, by content; thread-safe (the detection
    passes read ahead on a thread). Entries are never handed out: :func:`read_raw_image` returns
    conversions or copies of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, NDArray] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def budget_bytes() -> int:
        raw = os.environ.get("PLENOCAL_DECODED_CACHE_MB")
        try:
            mb = float(raw) if raw not in (None, "") else DECODED_CACHE_MB
        except ValueError:
            mb = DECODED_CACHE_MB
        return max(int(mb * 2**20), 0)

    def get(self, key: bytes) -> NDArray | None:
        with self._lock:
            img = self._entries.get(key)
            if img is not None:
                self._entries.move_to_end(key)
            return img

    def put(self, key: bytes, img: NDArray) -> None:
        budget = self.budget_bytes()
        if img.nbytes > budget:
            return
        img.flags.writeable = False
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = img
            self._bytes += img.nbytes
            while self._bytes > budget:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


_DECODED = _DecodedImages()


def bit_depth_of(array: NDArray) -> int:
    """8 for uint8, 16 for uint16."""
    if array.dtype == np.uint8:
        return 8
    if array.dtype == np.uint16:
        return 16
    raise DataError(f"raw images must be uint8 or uint16, got {array.dtype}")


def rgb_to_grey(rgb: NDArray) -> NDArray[np.float64]:
    """BT.601 luma of an RGB array, shape (H, W, 3) -> (H, W), float64, same scale."""
    w = np.asarray(GREY_WEIGHTS)
    return rgb.astype(np.float64) @ w


def read_raw_image(
    path: str | Path,
    *,
    color: Color | None = None,
    as_grey: bool = True,
    expected_shape: tuple[int, int] | None = None,
    bit_depth: int | None = None,
    keep: bool = True,
) -> NDArray:
    """Read a raw image.

    Parameters
    ----------
    path : str or Path
        PNG or TIFF, 8- or 16-bit.
    color : {"grey", "rgb", "bayer-rggb"}, optional
        How the stored image is to be understood (the manifest's ``image_format.color``). By
        default one channel is grey and three channels are RGB; a Bayer mosaic must be declared.
    as_grey : bool
        True (default): float64 grey in [0, 1], shape (H, W), after the conversion documented in
        the module. False: the stored integers, shape (H, W) or (H, W, 3) in RGB order.
    expected_shape : (height, width), optional
        Checked against the image.
    bit_depth : {8, 16}, optional
        The stored bit depth the dataset declares (``image_format.bit_depth``), checked: a 16-bit
        white in an 8-bit dataset was read at another scale without a word.
    keep : bool
        Keep the decoded image for the next read of the same content (:data:`DECODED_CACHE_MB`;
        default). False for an image read once (a frame of a depth sequence); one kept before is
        still used.

    Raises
    ------
    InputFileError
        Missing or undecodable file, unsupported bit depth, channel count not matching ``color``,
        size different from ``expected_shape``.
    """
    p = Path(path)
    if color is not None and color not in COLORS:
        raise ValueError(f"color must be one of {COLORS}, got {color!r}")
    if not p.is_file():
        raise InputFileError(p, "image file does not exist")
    try:
        buf = np.fromfile(p, dtype=np.uint8)
    except OSError as exc:
        raise InputFileError(p, f"cannot read image ({exc.strerror})") from None
    if not buf.size:
        raise InputFileError(p, "image file is empty (expected an 8- or 16-bit PNG or TIFF)")
    key = hashlib.sha256(buf.data).digest()
    img = _DECODED.get(key)
    if img is None:
        # libpng and OpenCV print their own complaints on file descriptor 2: keep them, quoted, in
        # plenocal's one line instead.
        with captured_stderr() as said:
            img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
        if img is None:
            detail = first_line(said[0])
            raise InputFileError(p, f"cannot decode image ({detail + '; ' if detail else ''}expected an 8- or 16-bit PNG or TIFF)")
        if keep and img.dtype in (np.uint8, np.uint16):
            _DECODED.put(key, img)
    if img.dtype not in (np.uint8, np.uint16):
        raise InputFileError(p, f"unsupported pixel type {img.dtype} (expected 8- or 16-bit integers)")
    stored = 8 if img.dtype == np.uint8 else 16
    if bit_depth is not None and stored != bit_depth:
        raise InputFileError(p, f"image is {stored}-bit but the dataset declares {bit_depth}-bit images (manifest.json "
                                "image_format.bit_depth); every image of a dataset has one format: convert it or fix "
                                "the manifest")
    if img.ndim == 3 and img.shape[2] == 4:
        img = img[:, :, :3]  # drop alpha
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    channels = 1 if img.ndim == 2 else img.shape[2]
    if channels not in (1, 3):
        raise InputFileError(p, f"expected 1 or 3 channels, got {channels}")
    if color is None:
        color = "grey" if channels == 1 else "rgb"
    expected_channels = 3 if color == "rgb" else 1
    if channels != expected_channels:
        raise InputFileError(p, f"image declared {color} must have {expected_channels} channel(s), got {channels}")
    if expected_shape is not None and img.shape[:2] != tuple(expected_shape):
        raise InputFileError(
            p,
            f"image size {img.shape[1]}x{img.shape[0]} px does not match the camera "
            f"{expected_shape[1]}x{expected_shape[0]} px",
        )
    if channels == 3:
        img = img[:, :, ::-1]  # OpenCV BGR -> RGB
    if not as_grey:  # a kept image (read-only) is copied: it stays as decoded for the next read
        return np.ascontiguousarray(img) if img.flags.writeable else np.array(img, order="C")
    full = 255.0 if img.dtype == np.uint8 else 65535.0
    if color == "grey":
        grey = img.astype(np.float64)
    elif color == "rgb":
        grey = rgb_to_grey(img)
    else:
        if img.shape[0] < 2 or img.shape[1] < 2:
            raise InputFileError(p, "a Bayer mosaic needs at least 2x2 pixels")
        grey = rgb_to_grey(cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_BayerBG2RGB))
    return grey / full


def write_raw_image(path: str | Path, array: NDArray, bit_depth: int = 8) -> Path:
    """Write a raw image as PNG or TIFF (from the extension), atomically.

    Parameters
    ----------
    path : str or Path
        ``.png``, ``.tif`` or ``.tiff``.
    array : ndarray, shape (H, W) or (H, W, 3) (RGB order)
        Floats in [0, 1] (scaled by 2^bit_depth − 1 and rounded; values outside are clipped), or
        unsigned integers whose dtype matches ``bit_depth``.
    bit_depth : {8, 16}

    Returns
    -------
    Path
    """
    p = Path(path)
    suffix = _SUFFIXES.get(p.suffix.lower())
    if suffix is None:
        raise InputFileError(p, f"unsupported image extension {p.suffix!r} (expected .png, .tif or .tiff)")
    if bit_depth not in (8, 16):
        raise DataError(f"bit_depth must be 8 or 16, got {bit_depth}")
    a = np.asarray(array)
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise DataError(f"image array must have shape (H, W) or (H, W, 3), got {a.shape}")
    dtype = np.uint8 if bit_depth == 8 else np.uint16
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)):
            raise DataError("image array has non-finite values")
        full = float(np.iinfo(dtype).max)
        out = np.rint(np.clip(a, 0.0, 1.0) * full).astype(dtype)
    elif a.dtype == dtype:
        out = a
    else:
        raise DataError(f"image array of dtype {a.dtype} cannot be written at {bit_depth} bits")
    if out.ndim == 3:
        out = out[:, :, ::-1]  # RGB -> BGR for OpenCV
    with captured_stderr() as said:
        ok, encoded = cv2.imencode(suffix, np.ascontiguousarray(out))
    if not ok:
        detail = first_line(said[0])
        raise DataError(f"OpenCV could not encode the image as {suffix}" + (f" ({detail})" if detail else ""))
    return atomic_write_bytes(p, encoded.tobytes())


__all__ = ["COLORS", "GREY_WEIGHTS", "bit_depth_of", "read_raw_image", "rgb_to_grey", "write_raw_image"]
