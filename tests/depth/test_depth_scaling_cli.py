"""``plenocal depth-scaling`` and ``plenocal depth --scaling`` on small R12-A renders: five tilted
calibration boards with their true poses and two fronto-parallel translation frames. The fit's
statistics are tested on synthetic samples (tests/depth/test_scaling.py); here the samples the
command gathers from raw images, its decision, and how ``plenocal depth`` applies a scaling."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io.camera import write_camera
from plenocal.io.dataset import ImageEntry, ImageFormat, ImageRole, Manifest, write_manifest
from plenocal.io.poses import write_poses
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard
from plenocal.sim.dataset import camera_spec
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render

BOARD = Checkerboard(10, 8, 2.5, 1.25)
KAPPA = 0.63
CALIBRATION = {0: (230.0, 0.25, 0.0), 1: (260.0, 0.0, -0.3), 2: (290.0, -0.2, 0.2), 3: (320.0, 0.3, 0.15), 4: (350.0, -0.25, -0.2)}
"""frame: (distance of the board centre in mm, tilts about x and y in rad)."""
TRANSLATION = {100: 250.0, 101: 300.0}


def _png16(path: Path, img: np.ndarray) -> None:
    cv2.imwrite(str(path), np.clip(np.rint(img * 60000.0), 0, 65535).astype(np.uint16))


def _pose(z: float, ax: float, ay: float) -> Pose:
    cx, sx, cy, sy = np.cos(ax), np.sin(ax), np.cos(ay), np.sin(ay)
    R = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]]) @ np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    half = np.array([(BOARD.columns - 1) * BOARD.square_mm / 2, (BOARD.rows - 1) * BOARD.square_mm / 2, 0.0])
    return Pose(R, np.array([0.0, 0.0, z]) - R @ half)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    p = preset("r12-a", small=True)
    cam = p.camera
    root = tmp_path_factory.mktemp("scaling-ds")
    optics = build_optics(cam)
    N = cam.main_lens.f_number
    _png16(root / "white.png", render(cam, WhiteDiffuser(), rays=64, seed=0, image_id=999, optics=optics))
    entries = [ImageEntry("white.png", ImageRole.DEVIGNETTING, f_number=N)]
    poses = {}
    for frame, (z, ax, ay) in CALIBRATION.items():
        poses[frame] = _pose(z, ax, ay)
        img = render(cam, Scene((CheckerboardPlate(BOARD, poses[frame]),), background=0.3), rays=32, seed=0, image_id=frame, optics=optics)
        _png16(root / f"frame-{frame}.png", img)
        entries.append(ImageEntry(f"frame-{frame}.png", ImageRole.CALIBRATION, f_number=N, frame=frame))
    for frame, z in TRANSLATION.items():
        img = render(cam, Scene((CheckerboardPlate(BOARD, _pose(z, 0.0, 0.0)),), background=0.3), rays=32, seed=0,
                     image_id=frame, optics=optics)
        _png16(root / f"frame-{frame}.png", img)
        entries.append(ImageEntry(f"frame-{frame}.png", ImageRole.TRANSLATION, f_number=N, frame=frame, sequence=0,
                                  displacement_mm=z - 250.0))
    write_manifest(root, Manifest(camera_spec(p), BOARD, tuple(entries), ImageFormat(bit_depth=16)))
    write_camera(root / "camera-true.json", cam)
    write_poses(root / "poses.json", poses)
    (root / "kappa.json").write_text(json.dumps({"format": "plenocal-kappa", "version": 1, "kappa": KAPPA}))
    return root


def test_depth_scaling_measures_the_matcher_on_the_calibration_frames(dataset, tmp_path, capsys):
    """Five frames with the true camera: every frame's board micro-images matched (their true w from
    the pose), the matcher within 1.5 % of the boards in w at 260–350 mm (measured −0.4 … +0.8 %; at
    230 mm −5.6 %, the near end of the search), and with five frames no scaling is kept (W 1.9
    against 2·F(2, 3)'s 61.6)."""
    out = tmp_path / "scaling"
    assert main(["depth-scaling", str(dataset), "--camera", str(dataset / "camera-true.json"), "--poses",
                 str(dataset / "poses.json"), "--kappa", str(dataset / "kappa.json"), "-o", str(out)]) == 0
    doc = json.loads((out / "depth-scaling.json").read_text())
    assert doc["format"] == "plenocal-depth-scaling" and sorted(doc["inputs"]["images"]) == ["0", "1", "2", "3", "4"]
    sc = doc["scaling"]
    assert sc["n_frames"] == 5 and not sc["kept"] and sc["wald"] < sc["threshold"]
    for f, frame in sc["per_frame"].items():
        assert frame["micro_images"] > 500, f
        assert frame["z_median_mm"] == pytest.approx(CALIBRATION[int(f)][0], rel=0.01)
        if int(f) > 0:
            assert abs(frame["w_error_before_percent"]) < 1.5, (f, frame)
    assert "not applied" in capsys.readouterr().out.splitlines()[-1]


def test_depth_applies_a_kept_scaling_to_every_estimate(dataset, tmp_path):
    """``plenocal depth --scaling``: each PLY's υ is 1/(c0 + c1/υ) of the unscaled run's, its points
    follow, and depth.json records the scaling; a scaling that was not kept changes no byte."""
    from plyfile import PlyData

    from plenocal.depth.metric import points_from_virtual_depth
    from plenocal.depth.scaling import DepthScaling
    from plenocal.io.camera import read_camera

    camera = read_camera(dataset / "camera-true.json")
    kept = DepthScaling((0.002, 0.98), ((1e-8, 0.0), (0.0, 1e-5)), 40.0, 21.8, True, 8, 1000, "test")
    dropped = DepthScaling((0.002, 0.98), ((1e-8, 0.0), (0.0, 1e-5)), 4.0, 21.8, False, 8, 1000, "test")
    for name, sc in (("kept", kept), ("dropped", dropped)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"format": "plenocal-depth-scaling", "version": 1, "scaling": sc.to_json()}))
    base = ["depth", str(dataset), "--camera", str(dataset / "camera-true.json"), "--kappa", str(dataset / "kappa.json"),
            "--frames", "100,101"]
    assert main([*base, "-o", str(tmp_path / "raw")]) == 0
    assert main([*base, "--scaling", str(tmp_path / "kept.json"), "-o", str(tmp_path / "scaled")]) == 0
    assert main([*base, "--scaling", str(tmp_path / "dropped.json"), "-o", str(tmp_path / "same")]) == 0
    doc = json.loads((tmp_path / "scaled" / "depth.json").read_text())
    assert doc["scaling"]["applied"] and doc["scaling"]["c1"] == 0.98
    for f in TRANSLATION:
        name = f"frame-{f}.ply"
        raw = PlyData.read(str(tmp_path / "raw" / "depth" / name))["vertex"]
        scaled = PlyData.read(str(tmp_path / "scaled" / "depth" / name))["vertex"]
        ups = np.asarray(raw["virtual_depth"], dtype=np.float64)
        np.testing.assert_allclose(np.asarray(scaled["virtual_depth"]), 1.0 / (0.002 + 0.98 / ups), rtol=1e-6)
        k, l = np.asarray(scaled["k"]), np.asarray(scaled["l"])
        expected = points_from_virtual_depth(camera, k, l, 1.0 / (0.002 + 0.98 / ups))
        np.testing.assert_allclose(np.asarray(scaled["z"]), expected[:, 2], rtol=1e-6)
        if f == 100:  # w ≈ 0.06 at 250 mm: w + 0.002 − 2 % of w moves the board by ~0.5 %
            assert abs(np.median(np.asarray(scaled["z"])) / np.median(np.asarray(raw["z"])) - 1) > 2e-3
        assert (tmp_path / "same" / "depth" / name).read_bytes() == (tmp_path / "raw" / "depth" / name).read_bytes()


def _depth_refusal(dataset, tmp_path, capsys, scaling):
    """``plenocal depth`` with ``--scaling scaling``: exit 2, nothing written; its one error line."""
    code = main(["depth", str(dataset), "--camera", str(dataset / "camera-true.json"), "--kappa", str(dataset / "kappa.json"),
                 "--scaling", str(scaling), "-o", str(tmp_path / "out")])
    assert code == 2
    assert not (tmp_path / "out").exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


def test_depth_refuses_a_scaling_file_that_is_not_one(dataset, tmp_path, capsys):
    bad = tmp_path / "kappa-as-scaling.json"
    bad.write_text((dataset / "kappa.json").read_text())
    err = _depth_refusal(dataset, tmp_path, capsys, bad)
    assert "kappa-as-scaling.json" in err and "plenocal depth-scaling" in err


def test_depth_refuses_a_scaling_whose_frame_summaries_are_not_numbers(dataset, tmp_path, capsys):
    """A per-frame summary edited into a string (the extrapolation check reads them) is one line
    naming the file, exit 2, nothing written."""
    from plenocal.depth.scaling import DepthScaling

    sc = DepthScaling((0.002, 0.98), ((1e-8, 0.0), (0.0, 1e-5)), 40.0, 21.8, True, 8, 1000, "test",
                      {0: {"w_matched": 0.1, "z_median_mm": 900.0, "correction_sigma_percent": 0.2}}).to_json()
    sc["per_frame"]["0"]["w_matched"] = "0.1 or so"
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps({"format": "plenocal-depth-scaling", "version": 1, "scaling": sc}))
    err = _depth_refusal(dataset, tmp_path, capsys, bad)
    assert "edited.json" in err and "malformed scaling" in err


def test_a_calibration_frame_without_its_white_is_skipped_not_fatal(dataset, tmp_path):
    """A calibration frame at an f-number no white has is left out of the fit (listed in the
    document), the others are used."""
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(dataset, ds)
    manifest = json.loads((ds / "manifest.json").read_text())
    for e in manifest["images"]:
        if e.get("frame") == 4:
            e["f_number"] = 11.0
    (ds / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "scaling"
    assert main(["depth-scaling", str(ds), "--camera", str(ds / "camera-true.json"), "--poses", str(ds / "poses.json"),
                 "--kappa", str(ds / "kappa.json"), "-o", str(out)]) == 0
    doc = json.loads((out / "depth-scaling.json").read_text())
    assert doc["frames_skipped"] == {"4": "no white at its f-number 11.0"}
    assert sorted(doc["scaling"]["per_frame"]) == ["0", "1", "2", "3"] and doc["scaling"]["n_frames"] == 4


def test_depth_says_where_a_scaling_is_extrapolated(dataset, tmp_path, capsys):
    """A kept scaling fitted on calibration frames at 1/υ 0.10–0.21 (the R12-C render's span and
    covariance, docs/depth.md "The search's ends"): frame 100 (1/υ ≈ 0.06, 250 mm) lies nearer than
    all of them, where the line's σ is over twice theirs — depth.json and the console say so."""
    from plenocal.depth.scaling import DepthScaling, correction_sigma

    c, C = (0.00365, 0.9545), ((1.78e-6, -1.215e-5), (-1.215e-5, 8.64e-5))
    per_frame = {i: {"w_matched": w, "z_median_mm": z, "correction_sigma_percent": float(100 * correction_sigma(c, C, w))}
                 for i, (w, z) in enumerate(((0.10, 990.0), (0.15, 1600.0), (0.21, 2500.0)))}
    sc = DepthScaling(c, C, 135.0, 13.0, True, 16, 20000, "test", per_frame)
    (tmp_path / "far.json").write_text(json.dumps({"format": "plenocal-depth-scaling", "version": 1, "scaling": sc.to_json()}))
    assert main(["depth", str(dataset), "--camera", str(dataset / "camera-true.json"), "--kappa", str(dataset / "kappa.json"),
                 "--frames", "100", "--scaling", str(tmp_path / "far.json"), "-o", str(tmp_path / "out")]) == 0
    ext = json.loads((tmp_path / "out" / "depth.json").read_text())["frames"]["100"]["scaling"]
    assert ext["extrapolated"] == "nearer"
    assert ext["correction_sigma_percent"] > 2 * ext["calibration_sigma_percent"][1]
    assert 0.04 < ext["w_matched_median"] < 0.08
    assert "warning: frame 100: depths nearer than every calibration frame" in capsys.readouterr().out
