"""``plenocal lens PRESCRIPTION``: a main lens's first-order data, and the exit-pupil prior a
calibration of a camera with that lens should use (``--lens`` of ``calibrate`` and ``run``).

The images cannot always place the main lens's exit pupil: its distance e behind the rear principal
plane H′ shares its signature in the (u, v) with the real micro-lenses' disparity scale, and the
scale of the calibration (F, D) follows e (docs/model.md, "Where the data-chosen e fails"). A lens's
prescription gives e exactly (paraxially): e = z(exit pupil) − z(H′). plenocal's renders with real
micro-lenses, calibrated with that prior (``--prior exit_pupil_mm=e±1``; "without": the pupil the
checkerboards chose, before the white images judged it — the Tessar's is now left out by them,
F −0.24 %, :data:`plenocal.calib.calibrate.WHITE_SLOPE_PUPIL_MARGIN`):

| lens (e) | F without / with | D without / with |
|---|---|---|
| Tessar (0.80 mm) | −6.3 % / −0.72 % (2.5σ) | −5.9 % / −0.16 % |
| telephoto at f/5.66 (13.2 mm) | +4.5 % / −0.76 % (2.8σ) | +5.0 % / −0.28 % |
| the real-optics R12-B's Cooke triplet (9.35 mm; the images: 9.65) | −0.40 % / −0.51 % | −0.12 % / −0.23 % |
| double-Gauss (−7.32 mm; the images place it: −7.29) | −0.40 % / −0.40 % | −0.17 % / −0.17 % |

PRESCRIPTION is a bundled design's name (``double-gauss``, ``tessar``, ``telephoto``,
``field-corrector``, ...; scaled to the camera's nominal focal length) or a ``plenocal-lens`` JSON
file (docs/formats.md; used as given). The prior's σ, :data:`LENS_EXIT_PUPIL_STD_MM`, is how far the
effective e of those calibrations sat from the paraxial one.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from plenocal.calib.priors import Prior
from plenocal.cli._args import bounded_float
from plenocal.errors import UsageError

HELP = "a main lens's first-order data from its prescription, and the exit-pupil prior for calibrating with it"

LENS_EXIT_PUPIL_STD_MM = 1.0
"""σ of the exit-pupil prior a prescription gives (mm). Calibrated with the paraxial e at ±1 mm,
the effective e came out +0.9 mm (Tessar), +0.8 mm (telephoto), +0.65 mm (Cooke triplet) and 0.0 mm
(double-Gauss) from it: pupil aberration and the micro-lenses' own departures move it that much."""

LENS_FOCAL_LENGTH_TOLERANCE = 0.10
"""A prescription file whose EFL is further than this fraction from the camera's nominal focal
length is refused as the camera's lens (a design in other units, or another lens); bundled designs
are scaled to the nominal focal length."""

DESIGN_F_NUMBER = 8.0
"""The f-number at which first-order data are computed when none is given: positions (H, H′, the
pupils, e) do not depend on it, only the pupils' diameters."""


def lens_data(spec: str, *, focal_length_mm: float | None = None, f_number: float | None = None) -> dict[str, Any]:
    """First-order data of the lens ``spec`` (a bundled name, scaled to ``focal_length_mm`` when
    given, or a prescription file, checked against it) at ``f_number``: positions in mm from the
    first vertex (+ towards the sensor) and ``exit_pupil_mm`` = e, the exit pupil behind H′.

    Raises
    ------
    InputFileError
        The file is missing or malformed (one line).
    UsageError
        A file whose EFL is not the camera's (:data:`LENS_FOCAL_LENGTH_TOLERANCE`).
    """
    from plenocal.sim.optics.library import DESIGN_NAMES, load_lens
    from plenocal.sim.optics.paraxial import paraxial_data

    bundled = spec in DESIGN_NAMES
    p = load_lens(spec, efl_mm=focal_length_mm if bundled else None)
    q = paraxial_data(p, f_number if f_number is not None else DESIGN_F_NUMBER)
    if not bundled and focal_length_mm is not None and \
            abs(q.efl_mm / focal_length_mm - 1.0) > LENS_FOCAL_LENGTH_TOLERANCE:
        raise UsageError(f"--lens {spec}: its EFL is {q.efl_mm:.4g} mm, {100 * (q.efl_mm / focal_length_mm - 1):+.0f} % "
                         f"from the camera's nominal {focal_length_mm:g} mm (allowed "
                         f"{100 * LENS_FOCAL_LENGTH_TOLERANCE:g} %): is it this camera's lens, in mm?")
    if not (math.isfinite(q.exit_pupil_z) and math.isfinite(q.h_prime_z)):
        raise UsageError(f"--lens {spec}: the lens is telecentric in image space (no finite exit pupil): "
                         "the exit-pupil model does not apply")
    return {"name": p.name, "bundled": bundled, **q.to_dict(), "exit_pupil_mm": q.exit_pupil_z - q.h_prime_z}


def lens_exit_pupil_prior(spec: str, *, focal_length_mm: float | None = None, priors: tuple[str, ...] = (),
                          exit_pupil: bool | None = None) -> Prior:
    """The prior ``exit_pupil_mm = e ± LENS_EXIT_PUPIL_STD_MM`` of the lens ``spec``
    (:func:`lens_data`), as the user's own (``--prior``); refused beside a ``--prior`` on the exit
    pupil (``priors``, their texts) or with the exit pupil left out (``exit_pupil`` False)."""
    if exit_pupil is False:
        raise UsageError(f"--lens {spec} gives the exit pupil a prior: it cannot go with --no-exit-pupil or --legacy-model")
    if any(Prior.parse(t).name == "exit_pupil_mm" for t in priors):
        raise UsageError(f"--lens {spec} gives exit_pupil_mm its prior: drop --prior exit_pupil_mm, or --lens")
    return _exit_pupil_prior(lens_data(spec, focal_length_mm=focal_length_mm))


def _exit_pupil_prior(data: dict[str, Any]) -> Prior:
    """``exit_pupil_mm = e ± LENS_EXIT_PUPIL_STD_MM`` from :func:`lens_data`'s e (to 0.1 µm)."""
    return Prior("exit_pupil_mm", round(float(data["exit_pupil_mm"]), 4), LENS_EXIT_PUPIL_STD_MM)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("lens", help=HELP, description=HELP[0].upper() + HELP[1:] + ".")
    p.add_argument("prescription", metavar="PRESCRIPTION",
                   help="a bundled design (double-gauss, tessar, telephoto, field-corrector, ...) or a plenocal-lens JSON file")
    p.add_argument("--focal-length-mm", type=bounded_float(0.0, 1e5, low_open=True), default=None,
                   help="scale a bundled design to this EFL (a file is checked against it)")
    p.add_argument("--f-number", type=bounded_float(0.5, 1000.0), default=None,
                   help=f"f-number for the pupils' diameters (default {DESIGN_F_NUMBER:g}; positions do not depend on it)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    d = lens_data(args.prescription, focal_length_mm=args.focal_length_mm, f_number=args.f_number)
    prior = _exit_pupil_prior(d)
    if args.json:
        print(json.dumps(d | {"prior": str(prior)}, indent=1))
        return 0
    rows = [("lens", f"{d['name']}{' (bundled)' if d['bundled'] else ''}"),
            ("EFL", f"{d['efl_mm']:.4f} mm"), ("f-number", f"{d['f_number']:.4g}"),
            ("H, H′ (from the first vertex)", f"{d['h_z']:+.4f}, {d['h_prime_z']:+.4f} mm (H→H′ {d['principal_separation_mm']:+.4f})"),
            ("entrance pupil", _pupil(d["entrance_pupil_z"], d["epd_mm"])),
            ("exit pupil", _pupil(d["exit_pupil_z"], d["xpd_mm"])),
            ("pupil magnification", f"{d['pupil_magnification']:.5f}"),
            ("e: exit pupil behind H′", f"{d['exit_pupil_mm']:+.4f} mm"),
            ("back focal length", f"{d['bfl_mm']:.4f} mm")]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if d["bundled"] and args.focal_length_mm is None:
        print(f"calibrate a camera with this lens with: --lens {args.prescription} (scaled to the camera's nominal focal "
              "length; this is the design's own)")
    else:
        print(f"calibrate a camera with this lens with: --lens {args.prescription} (the prior {prior}), or --prior {prior}")
    return 0


def _pupil(z: float | None, diameter: float | None) -> str:
    if z is None:
        return "at infinity (telecentric)"
    return f"{z:+.4f} mm, diameter {diameter:.4f} mm" if diameter is not None else f"{z:+.4f} mm"
