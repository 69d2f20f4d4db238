"""``plenocal lens PRESCRIPTION`` and ``--lens`` of ``calibrate``: a lens's first-order data and the
exit-pupil prior it gives a calibration (docs/model.md, "Where the data-chosen e fails")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plenocal.cli.lens import LENS_EXIT_PUPIL_STD_MM, lens_exit_pupil_prior
from plenocal.cli.main import main
from plenocal.errors import UsageError
from plenocal.sim.optics.library import design_path

# The real-optics R12-B set's lens (optiland's LensWithFieldCorrector scaled to EFL 50 mm): its
# README's first-order data, computed by the set's own trace and by optiland (agreeing to 2e-14).
FIELD_CORRECTOR = {"h_z": -1.2913, "h_prime_z": 12.3050, "entrance_pupil_z": 10.2026, "exit_pupil_z": 21.6506,
                   "epd_mm": 12.5000, "xpd_mm": 10.1636, "exit_pupil_mm": 9.3456}


def test_lens_prints_the_first_order_data_and_the_prior(capsys):
    assert main(["lens", "field-corrector", "--focal-length-mm", "50", "--f-number", "4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["efl_mm"] == pytest.approx(50.0, abs=1e-9)
    for k, v in FIELD_CORRECTOR.items():
        assert d[k] == pytest.approx(v, abs=1e-4), k
    assert d["prior"] == f"exit_pupil_mm=9.3456±{LENS_EXIT_PUPIL_STD_MM:g}"
    assert main(["lens", "tessar", "--focal-length-mm", "50"]) == 0
    out = capsys.readouterr().out
    assert "e: exit pupil behind H′" in out and "+0.8089 mm" in out and "--prior exit_pupil_mm=0.8089±1" in out


def test_lens_refuses_a_prescription_that_is_not_the_cameras(tmp_path, capsys):
    """A file is used as given: a design in other units (the telephoto's, EFL 127 mm) is not a 50 mm
    camera's lens; a missing file is one line; the prior cannot go beside one on the same quantity."""
    f = Path(shutil.copy(design_path("telephoto"), tmp_path / "tele.json"))
    with pytest.raises(UsageError, match=r"--lens .*tele.json: its EFL is 127 mm, \+154 % from the camera's nominal 50 mm"):
        lens_exit_pupil_prior(str(f), focal_length_mm=50.0)
    assert lens_exit_pupil_prior("telephoto", focal_length_mm=50.0).mean == pytest.approx(13.271, abs=1e-3)
    with pytest.raises(UsageError, match="drop --prior exit_pupil_mm, or --lens"):
        lens_exit_pupil_prior("tessar", focal_length_mm=50.0, priors=("exit_pupil_mm=3±1",))
    with pytest.raises(UsageError, match="cannot go with --no-exit-pupil"):
        lens_exit_pupil_prior("tessar", focal_length_mm=50.0, exit_pupil=False)
    assert main(["lens", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none.json: file does not exist" in err[0]
