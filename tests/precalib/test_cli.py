"""``plenocal precalibrate`` on a dataset folder of analytic white images (8-bit PNG)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io import (
    ImageEntry,
    ImageRole,
    Manifest,
    read_camera_file,
    read_observations,
    write_manifest,
    write_raw_image,
)
from plenocal.model import micro_image_centres
from plenocal.model.spec import CameraSpec
from plenocal.model.target import Checkerboard
from plenocal.model.white import internal_parameters


def make_dataset(folder, camera, whites, *, n_calib=4.0):
    entries = []
    for w in whites:
        name = f"images/white-{w.f_number:g}.png"
        write_raw_image(folder / name, np.clip(np.rint(w.image), 0, 255).astype(np.uint8), 8)
        entries.append(ImageEntry(name, ImageRole.WHITE, f_number=w.f_number))
    entries.append(ImageEntry(entries[0].path, ImageRole.DEVIGNETTING, f_number=n_calib))
    spec = CameraSpec(
        pixel_size_mm=camera.sensor.pixel_size_mm,
        width_px=camera.sensor.width_px,
        height_px=camera.sensor.height_px,
        lattice=camera.mla.lattice,
        n_types=3,
        type_row_shift=(0, 1),
        main_lens_focal_length_mm=50.0,
        focus_distance_mm=450.0,
        configuration=camera.configuration,
    )
    write_manifest(folder, Manifest(camera_spec=spec, target=Checkerboard(9, 5, 10.0), images=tuple(entries), name="small"))
    return folder


def test_precalibrate_cli_writes_camera_observations_and_plots(tmp_path, small_camera, small_whites, capsys):
    ds = make_dataset(tmp_path / "ds", small_camera, small_whites)
    out = tmp_path / "out"
    assert main(["precalibrate", str(ds), "-o", str(out)]) == 0
    cam_file = read_camera_file(out / "camera.json")
    truth = internal_parameters(small_camera)
    assert cam_file.internal_parameters.m_mm == pytest.approx(truth.m_mm, rel=0.02)
    np.testing.assert_allclose(cam_file.internal_parameters.q_prime_mm, truth.q_prime_mm, rtol=0.02)
    assert cam_file.camera.d_mm == pytest.approx(small_camera.d_mm, rel=0.03)
    obs = read_observations(out / "observations.npz")
    err = obs.mic.uv - micro_image_centres(small_camera, obs.mic.k, obs.mic.l)
    assert np.sqrt(np.mean(np.sum(err**2, axis=1))) < 0.05  # 8-bit quantisation included
    report = json.loads((out / "precalibration.json").read_text())
    assert report["types"]["row_shift"] == [0, 1]
    assert [a["used"] for a in report["apertures"]] == [False, True, True, True, True]
    assert [w["n_excluded"] for w in report["excluded_micro_images"]["per_white"]] == [0] * 5
    assert (out / "radii.png").stat().st_size > 10_000 and (out / "radii.svg").is_file()
    assert (out / "centres.png").is_file()
    assert "types (0, 1)" in capsys.readouterr().out


def test_precalibrate_cli_single_white_is_one_line_error(tmp_path, small_camera, small_whites, capsys):
    ds = make_dataset(tmp_path / "ds", small_camera, small_whites[2:3])
    out = tmp_path / "out"
    assert main(["precalibrate", str(ds), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "white images at >= 2 different f-numbers, got 1" in err
    assert not out.exists()


def test_precalibrate_cli_indistinct_types_fail_with_the_cause_and_the_radii_plot(tmp_path, small_camera, capsys,
                                                                                  monkeypatch):
    """When Ω cannot be estimated the one-line error names the cause and the radii plot that shows
    it, written on purpose to a folder of its own in the temporary directory: the output folder is
    not created (a stage is complete or absent; it held radii.png alone). --no-plots writes none."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    from render import render_white

    from plenocal.model import MicroLensArray
    from plenocal.precalib.pipeline import WhiteImage

    mla = small_camera.mla
    cam = small_camera.replace(mla=MicroLensArray(mla.lattice, mla.pitch_mm, mla.rotation_xyz_rad, mla.translation_mm,
                                                  (0.5530, 0.5525, 0.5520), mla.types))
    whites = [WhiteImage(N, render_white(cam, N, noise=6.0, black_level=16.0, seed=i)) for i, N in enumerate((5.656854249, 8.0, 11.313708499))]
    ds = make_dataset(tmp_path / "ds", cam, whites)
    out = tmp_path / "out"
    assert main(["precalibrate", str(ds), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "types cannot be told apart" in err and f"{out} not written" in err
    (figure,) = (tmp_path / "tmp").glob("plenocal-precalibrate-failed-*/radii.png")
    assert str(figure) in err and figure.stat().st_size > 10_000
    assert not out.exists()
    assert main(["precalibrate", str(ds), "-o", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "types cannot be told apart" in err and "for the diagnosis" not in err
    assert not out.exists() and len(list((tmp_path / "tmp").iterdir())) == 1


def test_precalibrate_cli_reports_the_micro_images_it_left_out(tmp_path, small_camera, small_whites, capsys):
    """Whites clipped towards the edge (test_conformity.vignetted): per white, how many were left
    out, by which rule, and where — none near the principal point, all in the outermost ring."""
    from test_conformity import vignetted

    from plenocal.precalib.pipeline import WhiteImage

    whites = [WhiteImage(w.f_number, vignetted(w.image, small_camera, w.f_number)[0]) for w in small_whites[:4]]
    ds = make_dataset(tmp_path / "ds", small_camera, whites)
    out = tmp_path / "out"
    assert main(["precalibrate", str(ds), "-o", str(out)]) == 0
    ex = json.loads((out / "precalibration.json").read_text())["excluded_micro_images"]
    assert ex["rules"]["max_anisotropy"] == pytest.approx(0.01)
    assert len(ex["per_white"]) == 4
    for w in ex["per_white"]:
        assert w["n_excluded"] > 300 and w["n_dark"] > 100
        assert w["n_excluded"] <= w["n_dark"] + w["n_anisotropic"] + w["n_off_lattice"]
        rings = w["excluded_fraction_by_ring"]
        assert rings[0] == 0.0 and rings[-1] == 1.0
        assert w["excluded_radius_mm"]["p05"] > 1.0  # CLIP_START: 0.5 of the 3.4 mm half-diagonal
    assert "micro-images left out as not following the white-image model" in capsys.readouterr().out


def test_precalibrate_cli_no_conforming_micro_images_is_one_line_error(tmp_path, small_camera, small_whites, capsys, monkeypatch):
    from plenocal.precalib import conformity as cf
    from plenocal.precalib import pipeline

    def all_dark(moments, mass, lattice, image_shape, *, f_number):
        n = len(moments.k)
        return cf.Conformity(f_number, moments.k, moments.l, moments.centre_px, np.ones(n, dtype=bool),
                             np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), 0.0, 0.0)

    monkeypatch.setattr(pipeline, "conformity", all_dark)
    ds = make_dataset(tmp_path / "ds", small_camera, small_whites[1:4])
    out = tmp_path / "out"
    assert main(["precalibrate", str(ds), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "only 0 micro-images follow the white-image model" in err
    assert not out.exists()
