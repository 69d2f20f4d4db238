"""``plenocal depth``: a dataset of two rendered fronto-parallel plates (small R12-A, 250 and
300 mm), the true camera, κ from a kappa.json; PLY read back with plyfile."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.io.camera import write_camera
from plenocal.io.dataset import ImageEntry, ImageFormat, ImageRole, Manifest, write_manifest
from plenocal.model.geometry import Pose
from plenocal.model.target import Checkerboard
from plenocal.sim.dataset import camera_spec
from plenocal.sim.presets import preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.tracer import build_optics, render

plyfile = pytest.importorskip("plyfile")

DISTANCES_MM = {0: 250.0, 1: 300.0}
BOARD = Checkerboard(10, 8, 2.5, 1.25)
KAPPA = 0.63
MEDIAN_TOLERANCE = 0.02
"""Per micro-image, as tests/depth/test_matching.py (there 1.12 % and 0.41 %); the CLI writes the
aggregated estimates (there 0.53 % and 0.11 %), here with 16-bit PNG quantisation on top."""


def _png16(path: Path, img: np.ndarray) -> None:
    cv2.imwrite(str(path), np.clip(np.rint(img * 60000.0), 0, 65535).astype(np.uint16))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    p = preset("r12-a", small=True)
    cam = p.camera
    root = tmp_path_factory.mktemp("depth-ds")
    optics = build_optics(cam)
    _png16(root / "white.png", render(cam, WhiteDiffuser(), rays=64, seed=0, image_id=999, optics=optics))
    entries = [ImageEntry("white.png", ImageRole.DEVIGNETTING, f_number=cam.main_lens.f_number)]
    for frame, z in DISTANCES_MM.items():
        pose = Pose(np.eye(3), np.array([-12.5, -10.0, z]))
        img = render(cam, Scene((CheckerboardPlate(BOARD, pose),), background=0.3), rays=32, seed=0, image_id=frame, optics=optics)
        _png16(root / f"frame-{frame}.png", img)
        entries.append(ImageEntry(f"frame-{frame}.png", ImageRole.TRANSLATION, f_number=cam.main_lens.f_number, frame=frame,
                                  sequence=0, displacement_mm=z - 250.0))
    write_manifest(root, Manifest(camera_spec(p), BOARD, tuple(entries), ImageFormat(bit_depth=16)))
    write_camera(root / "camera-true.json", cam)
    (root / "kappa.json").write_text(json.dumps({"format": "plenocal-kappa", "version": 1, "kappa": KAPPA}))
    return root


def test_depth_cli_writes_point_clouds_close_to_the_plates(dataset, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["depth", str(dataset), "--camera", str(dataset / "camera-true.json"),
                 "--kappa", str(dataset / "kappa.json"), "-o", str(out)])
    assert code == 0
    doc = json.loads((out / "depth.json").read_text())
    assert doc["format"] == "plenocal-depth"
    assert doc["inputs"]["kappa"]["value"] == KAPPA
    for frame, z in DISTANCES_MM.items():
        ply = plyfile.PlyData.read(str(out / "depth" / f"frame-{frame}.ply"))
        v = ply["vertex"]
        names = [p.name for p in v.properties]
        assert names[:5] == ["x", "y", "z", "confidence", "grey"]
        zs = np.asarray(v["z"], dtype=np.float64)
        assert len(zs) == doc["frames"][str(frame)]["counts"]["estimated"] > 1000
        assert np.median(np.abs(zs - z)) / z < MEDIAN_TOLERANCE
        conf = np.asarray(v["confidence"])
        assert np.all((conf >= 0) & (conf <= 1))
        assert np.asarray(v["grey"]).dtype == np.uint8
        for name in (f"frame-{frame}-depth.png", f"frame-{frame}-central.png", f"frame-{frame}-allfocus.png"):
            img = cv2.imread(str(out / "depth" / name), cv2.IMREAD_UNCHANGED)
            assert img is not None and img.shape[:2] == (200, 250)
        allfocus = cv2.imread(str(out / "depth" / f"frame-{frame}-allfocus.png"), cv2.IMREAD_UNCHANGED)
        assert allfocus.ndim == 2 and np.mean(allfocus == 0) < 0.05  # drawn everywhere but the sensor's rim
        assert doc["frames"][str(frame)]["allfocus"]["drawn"] > 1500
    assert sorted(p.name for p in out.iterdir()) == ["depth", "depth.json"]
    printed = capsys.readouterr().out
    assert "frame 1:" in printed
    # The small R12-A's default range (200–540 mm for the true camera) crosses the MLA's conjugate (~440 mm): what lies
    # beyond is not searched, and depth.json and the console say so.
    search = doc["search"]
    assert search["default"] is True and search["distance_range_mm"] == pytest.approx([200.0, 540.0])
    near, far = search["distances_not_searched_mm"]
    assert 400.0 < near < 460.0 and far == pytest.approx(540.0)
    assert f"objects at {near:.0f}–540 mm, on its other side, are not searched" in printed


def test_depth_on_a_local_dask_cluster_gives_the_same_bytes(dataset, tmp_path, capsys):
    """The frames on a real local cluster of 2 worker processes (one numba thread each) against
    this process (numba's own threads): every PLY and PNG the same bytes."""
    pytest.importorskip("distributed")
    base = ["depth", str(dataset), "--camera", str(dataset / "camera-true.json"), "--kappa", str(dataset / "kappa.json")]
    assert main([*base, "-o", str(tmp_path / "one")]) == 0
    assert main([*base, "-o", str(tmp_path / "dask"), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "on a local Dask cluster of 2 workers" in out
    one = sorted((tmp_path / "one" / "depth").iterdir())
    dask = sorted((tmp_path / "dask" / "depth").iterdir())
    assert [p.name for p in one] == [p.name for p in dask] and len(one) == 4 * len(DISTANCES_MM)
    for a, b in zip(one, dask, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    doc = json.loads((tmp_path / "dask" / "depth.json").read_text())
    assert list(doc["frames"]) == [str(f) for f in DISTANCES_MM]
    assert doc["execution"]["where"] == "local Dask cluster of 2 workers"


def test_depth_scheduler_that_does_not_answer_is_one_line(dataset, tmp_path, capsys):
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    code = main(["depth", str(dataset), "--camera", str(dataset / "camera-true.json"), "--kappa", "0.5", "-o", str(out),
                 "--scheduler", "tcp://127.0.0.1:9"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "--scheduler tcp://127.0.0.1:9" in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kappa", "-1"], "--kappa"),
        (["--kappa", "nope.json"], "nope.json: no such file"),
        (["--kappa", "0.5", "--frames", "7"], "--frames: no frame 7"),
        ([], "--kappa: pass the kappa.json"),
    ],
)
def test_depth_cli_bad_input_is_one_line(dataset, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    code = main(["depth", str(dataset), "--camera", str(dataset / "camera-true.json"), "-o", str(out), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_depth_cli_gives_no_depth_beyond_the_model_field_unless_asked(dataset, tmp_path, capsys):
    """A camera.json whose calibration limited the model's field (``model_field.radius_mm``): no
    point beyond it in the PLY, the count in depth.json and in the frame's line; ``--whole-field``
    matches there too."""
    cam = preset("r12-a", small=True).camera
    radius_mm = 1.2
    path = write_camera(tmp_path / "camera.json", cam, model_field={"radius_mm": radius_mm, "reach_mm": 3.0, "rings": []})
    pp = np.asarray(cam.principal_point_px)
    counts = {}
    for extra in ([], ["--whole-field"]):
        out = tmp_path / f"out{len(extra)}"
        assert main(["depth", str(dataset), "--camera", str(path), "--kappa", str(dataset / "kappa.json"),
                     "-o", str(out), "--frames", "1", *extra]) == 0
        doc = json.loads((out / "depth.json").read_text())
        assert doc["model_field"] == {"radius_mm": radius_mm, "applied": not extra}
        v = plyfile.PlyData.read(str(out / "depth" / "frame-1.ply"))["vertex"]
        k, l = np.asarray(v["k"]), np.asarray(v["l"])
        r_mm = np.hypot(*(cam.grid.centres(k, l) - pp).T) * cam.sensor.pixel_size_mm
        counts[bool(extra)] = doc["frames"]["1"]["counts"]
        if extra:
            assert r_mm.max() > 1.5 * radius_mm and counts[True]["outside_field"] == 0
        else:
            assert r_mm.max() <= radius_mm and counts[False]["outside_field"] > 300
            assert f"{counts[False]['outside_field']} beyond the model's field" in capsys.readouterr().out
    assert counts[False]["estimated"] < counts[True]["estimated"] - counts[False]["outside_field"] // 2


def test_depth_cli_per_pixel(dataset, tmp_path, capsys):
    """``--per-pixel``: the kept pixels' points (read back with plyfile) lie on the plate, each
    from its own pixel, many more of them than micro-images (measured 56 078 against 1 621, median
    z 299.4 mm for 300); the central-view map and depth.json's counts agree with the PLY; the
    micro-image outputs are the same bytes as without it."""
    base = ["depth", str(dataset), "--camera", str(dataset / "camera-true.json"), "--kappa", str(dataset / "kappa.json"),
            "--frames", "1"]
    assert main([*base, "-o", str(tmp_path / "plain")]) == 0
    out = tmp_path / "out"
    assert main([*base, "-o", str(out), "--per-pixel"]) == 0
    assert "per pixel" in capsys.readouterr().out
    doc = json.loads((out / "depth.json").read_text())
    entry = doc["frames"]["1"]["per_pixel"]
    v = plyfile.PlyData.read(str(out / "depth" / "frame-1-pixels.ply"))["vertex"]
    assert [p.name for p in v.properties] == ["x", "y", "z", "confidence", "grey", "virtual_depth", "u", "v"]
    z = np.asarray(v["z"], dtype=np.float64)
    assert len(z) == entry["kept"] > 10 * doc["frames"]["1"]["counts"]["estimated"]
    assert entry["kept"] < entry["with_depth"] <= entry["refined"]
    assert np.median(np.abs(z - DISTANCES_MM[1])) / DISTANCES_MM[1] < MEDIAN_TOLERANCE
    conf = np.asarray(v["confidence"])
    assert np.all((conf >= doc["settings"]["per_pixel"]["min_confidence"]) & (conf < 1))
    u, w = np.asarray(v["u"]), np.asarray(v["v"])
    assert len(np.unique(u * 10_000 + w)) == len(u)  # one vertex per pixel
    assert u.min() >= 0 and u.max() < 1000 and w.min() >= 0 and w.max() < 800
    img = cv2.imread(str(out / "depth" / "frame-1-depth-pixels.png"), cv2.IMREAD_UNCHANGED)
    assert img is not None and img.shape == (200, 250, 3) and np.any(img.sum(axis=2) > 0)
    for name in ("frame-1.ply", "frame-1-depth.png", "frame-1-central.png", "frame-1-allfocus.png"):
        assert (out / "depth" / name).read_bytes() == (tmp_path / "plain" / "depth" / name).read_bytes(), name
    assert not (tmp_path / "plain" / "depth" / "frame-1-pixels.ply").exists()


def test_depth_leaves_out_the_points_a_camera_does_not_map(dataset, tmp_path, capsys):
    """A camera whose lateral distortion does not invert over the image (the 6-frame quick demo's
    q1…q3 of a calibration that could not place F): its depths of those micro-images have no point.
    They were NaN in depth.json's percentiles, which then could not be written (a traceback); they
    are counted and left out of the summary and the PLY, and the frame's line says why."""
    import dataclasses

    from plenocal.io.camera import read_camera

    cam = read_camera(dataset / "camera-true.json")
    bad = cam.replace(distortion=dataclasses.replace(cam.distortion, q1=-0.0165, q2=0.0109, q3=-0.0019))
    write_camera(tmp_path / "camera.json", bad)
    out = tmp_path / "out"
    assert main(["depth", str(dataset), "--camera", str(tmp_path / "camera.json"), "--kappa", str(dataset / "kappa.json"),
                 "-o", str(out), "--frames", "0"]) == 0
    doc = json.loads((out / "depth.json").read_text())
    frame = doc["frames"]["0"]
    assert 0 < frame["no_metric_point"] < frame["counts"]["estimated"]
    assert all(np.isfinite(v) for v in frame["z_percentiles_mm"].values())
    ply = plyfile.PlyData.read(str(out / "depth" / "frame-0.ply"))
    z = np.asarray(ply["vertex"]["z"])
    assert len(z) == frame["counts"]["estimated"] - frame["no_metric_point"] and np.all(np.isfinite(z))
    assert "depths have no point: the calibrated camera does not map them" in capsys.readouterr().out
