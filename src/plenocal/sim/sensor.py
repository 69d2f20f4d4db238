"""Sensor response: exposure, photon (Poisson) and read noise with a gain, quantisation, Bayer.

Applied to a noise-free radiance image from :func:`plenocal.sim.tracer.render` (1.0 = fully lit
by the white diffuser). Each effect can be switched off. Random numbers come from
``(seed, image_id)`` only, so the result does not depend on the number of threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from plenocal.errors import ModelError

COLORS = ("grey", "rgb", "bayer-rggb")


@dataclass(frozen=True)
class SensorResponse:
    """How radiance becomes stored digital numbers (DN).

    Attributes
    ----------
    bit_depth : {8, 16}
    color : {"grey", "rgb", "bayer-rggb"}
        Bayer RGGB: R at pixel (0, 0), G at (1, 0) and (0, 1), B at (1, 1) (docs/formats.md).
    white_level : float
        Fraction of full scale reached by radiance 1.0 (the diffuser): < 1 so whites never clip.
    electrons_at_white : float
        Photo-electrons collected at radiance 1.0 (sets the photon noise, σ = √electrons).
    read_noise_electrons : float
        Standard deviation of the read noise (electrons).
    photon_noise, read_noise : bool
    channel_gains : (float, float, float)
        Relative response of the R, G, B channels (RGB and Bayer output).
    """

    bit_depth: int = 8
    color: str = "grey"
    white_level: float = 0.85
    electrons_at_white: float = 8000.0
    read_noise_electrons: float = 4.0
    photon_noise: bool = True
    read_noise: bool = True
    channel_gains: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        if self.bit_depth not in (8, 16):
            raise ModelError(f"bit_depth must be 8 or 16, got {self.bit_depth}")
        if self.color not in COLORS:
            raise ModelError(f"color must be one of {', '.join(COLORS)}, got {self.color!r}")
        if not 0.0 < self.white_level <= 1.0:
            raise ModelError(f"white_level must be in (0, 1], got {self.white_level}")
        if not self.electrons_at_white > 0:
            raise ModelError(f"electrons_at_white must be > 0, got {self.electrons_at_white}")

    @property
    def full_scale(self) -> int:
        return (1 << self.bit_depth) - 1

    @property
    def gain_dn_per_electron(self) -> float:
        """Conversion gain: DN per photo-electron."""
        return self.white_level * self.full_scale / self.electrons_at_white

    @property
    def noise_free(self) -> bool:
        return not (self.photon_noise or self.read_noise)

    def apply(self, radiance: NDArray[np.floating], *, seed: int, image_id: int) -> NDArray[np.unsignedinteger]:
        """Expose, add noise, quantise (and mosaic) a radiance image.

        Parameters
        ----------
        radiance : ndarray, shape (H, W) or (H, W, 3)
            Relative radiance (1.0 = white diffuser).
        seed, image_id : int
            Noise stream.

        Returns
        -------
        ndarray, uint8 or uint16, shape (H, W) for grey and Bayer, (H, W, 3) for RGB.
        """
        rad = np.asarray(radiance, dtype=np.float32)
        gains = np.asarray(self.channel_gains, dtype=np.float32)
        if self.color == "grey":
            signal = rad if rad.ndim == 2 else rad @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        else:
            rgb = rad[:, :, None].repeat(3, axis=2) if rad.ndim == 2 else rad
            rgb = rgb * gains
            if self.color == "rgb":
                signal = rgb
            else:
                H, W = rgb.shape[:2]
                vv, uu = np.mgrid[0:H, 0:W]
                channel = np.where((vv % 2 == 0) & (uu % 2 == 0), 0, np.where((vv % 2 == 1) & (uu % 2 == 1), 2, 1))
                signal = np.take_along_axis(rgb, channel[:, :, None], axis=2)[:, :, 0]
        electrons = signal.astype(np.float64) * self.electrons_at_white
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(image_id), 0x5E45]))
        if self.photon_noise:
            electrons = rng.poisson(np.clip(electrons, 0.0, None)).astype(np.float64)
        if self.read_noise and self.read_noise_electrons > 0:
            electrons += rng.normal(0.0, self.read_noise_electrons, electrons.shape)
        dn = np.rint(electrons * self.gain_dn_per_electron)
        dtype = np.uint8 if self.bit_depth == 8 else np.uint16
        return np.clip(dn, 0, self.full_scale).astype(dtype)
