"""``plenocal evaluate``: held-out frames (poses re-estimated, intrinsics fixed) and ε_z on a
translation sequence, on synthetic observations with known truth (R12-A fixture camera)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from plenocal.calib.synthetic import synthetic_observations
from plenocal.cli.main import main
from plenocal.io.camera import write_camera
from plenocal.io.dataset import ImageEntry, ImageRole, Manifest, write_manifest
from plenocal.io.observations import write_observations
from plenocal.io.poses import write_poses
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures, Observations
from plenocal.model.spec import CameraSpec
from plenocal.sim.poses import translation_poses

CAL = (0, 4, 9)
EVAL = {100: 2, 101: 7}  # evaluation frame → fixture pose it is derived from
DIST = (260.0, 270.0, 280.0, 295.0, 310.0)  # translation sequence: board distances, mm


def _dataset(folder: Path, camera, poses_fix, board, *, scale_camera: float = 1.0) -> dict[int, Pose]:
    cal = {f: poses_fix[f] for f in CAL}
    ev = {f: Pose(poses_fix[g].rotation, poses_fix[g].translation + np.array([4.0, -3.0, 6.0])) for f, g in EVAL.items()}
    tr = {200 + i: p for i, p in enumerate(translation_poses(board, DIST, camera=camera))}
    allp = cal | ev | tr
    noisy, _ = synthetic_observations(camera, allp, board, seed=11)
    images = [ImageEntry(f"cal{f}.png", ImageRole.CALIBRATION, frame=f) for f in CAL]
    images += [ImageEntry(f"ev{f}.png", ImageRole.EVALUATION, frame=f) for f in EVAL]
    images += [ImageEntry(f"tr{f}.png", ImageRole.TRANSLATION, frame=f, sequence=0, displacement_mm=DIST[f - 200] - DIST[0])
               for f in tr]
    s = camera.sensor
    spec = CameraSpec(s.pixel_size_mm, s.width_px, s.height_px, camera.mla.lattice, camera.n_types)
    write_manifest(folder, Manifest(camera_spec=spec, target=board, images=tuple(images)))
    write_observations(folder / "observations.npz", noisy)
    write_camera(folder / "camera.json", camera)
    write_poses(folder / "poses.json", cal)
    return allp


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, r12a_camera, r12a_poses, r12a_board):
    folder = tmp_path_factory.mktemp("ev")
    truth = _dataset(folder / "ds", r12a_camera, r12a_poses, r12a_board)
    assert main(["evaluate", str(folder / "ds"), "-o", str(folder / "out")]) == 0
    return json.loads((folder / "out" / "report.json").read_text()), truth


def test_reprojection_section_kept(evaluated):
    rep, _ = evaluated
    # Calibration frames with their given poses; held-out/translation features have no pose there.
    assert rep["rmse"]["uv_px"] == pytest.approx(0.3 * np.sqrt(2), rel=0.06)
    assert sorted(int(f) for f in rep["per_frame"]) == list(CAL)
    assert rep["skipped"]["features_without_pose"] > 0


def test_holdout_section(evaluated):
    rep, _ = evaluated
    h = rep["holdout"]
    assert h["frames_evaluated"] == sorted(EVAL) and h["frames_failed"] == []
    assert h["rmse"]["uv_px"] == pytest.approx(0.3 * np.sqrt(2), rel=0.06)
    assert h["rmse"]["rho_px"] == pytest.approx(0.05, rel=0.1)
    assert h["rmse"]["mic_px"] is None and h["n_mic"] == 0
    assert set(h["per_frame"]) == {str(f) for f in EVAL} and set(h["per_type"]) == {"0", "1", "2"}
    assert h["solver"]["converged"]


def test_translation_section(evaluated):
    rep, _ = evaluated
    t = rep["translation"]
    assert t["frames_evaluated"] == [200, 201, 202, 203, 204]
    assert t["epsilon_z_percent"]["n_pairs"] == 10
    # True camera, 0.3 px noise on ~1000 features per frame: t_z to a few 0.01 mm, so ε_z ≪ 1 %.
    assert 0 < t["epsilon_z_percent"]["mean"] < 0.5
    by = {g["displacement_mm"]: g["n_pairs"] for g in t["by_displacement"]}
    assert by[10.0] == 2 and by[50.0] == 1 and sum(by.values()) == 10
    assert [s["frame_i"] for s in t["per_step"]] == [200, 201, 202, 203]


def test_wrong_focal_length_shows_in_epsilon_z(tmp_path, r12a_camera, r12a_poses, r12a_board, capsys):
    """A camera whose F and D are 3 % off (the rest fixed) measures displacements wrong."""
    from plenocal.calib.synthetic import perturbed_camera

    _dataset(tmp_path / "ds", r12a_camera, r12a_poses, r12a_board)
    bad = perturbed_camera(r12a_camera, relative=0.03, principal_point_px=0.0, seed=0)
    write_camera(tmp_path / "bad.json", bad)
    assert main(["evaluate", str(tmp_path / "ds"), "--camera", str(tmp_path / "bad.json"), "-o", str(tmp_path / "o")]) == 0
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["translation"]["epsilon_z_percent"]["mean"] > 1.0
    assert rep["holdout"]["rmse"]["rho_px"] > 0.2  # 0.05 px with the true camera: the pose cannot absorb it
    assert "epsilon_z" in capsys.readouterr().out


def test_without_poses_only_reestimated_sections(tmp_path, r12a_camera, r12a_poses, r12a_board):
    _dataset(tmp_path / "ds", r12a_camera, r12a_poses, r12a_board)
    (tmp_path / "ds" / "poses.json").unlink()
    assert main(["evaluate", str(tmp_path / "ds"), "-o", str(tmp_path / "o")]) == 0
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert "rmse" not in rep and rep["inputs"]["poses"] is None
    assert {"holdout", "translation"} <= set(rep)


def test_translation_frames_without_features_is_an_error(tmp_path, r12a_camera, r12a_poses, r12a_board, capsys):
    """Only one translation frame observed: no pair, one-line error naming the observations."""
    from plenocal.io.observations import read_observations

    _dataset(tmp_path / "ds", r12a_camera, r12a_poses, r12a_board)
    obs = read_observations(tmp_path / "ds" / "observations.npz")
    keep = (obs.bap.frame < 201)
    write_observations(tmp_path / "ds" / "observations.npz",
                       Observations(BapFeatures(**{k: v[keep] for k, v in obs.bap.columns().items()}), obs.mic))
    out = tmp_path / "o"
    assert main(["evaluate", str(tmp_path / "ds"), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "observations.npz" in err and "translation frames [200]" in err and "\n" not in err
    assert not out.exists()


def _mislinked_dataset(folder: Path, camera, poses_fix, board, *, frame: int = 4, n: int = 15) -> None:
    """The test dataset with ``n`` features of calibration frame ``frame`` linked to the neighbouring node."""
    from plenocal.io.observations import read_observations

    _dataset(folder, camera, poses_fix, board)
    obs = read_observations(folder / "observations.npz")
    b = obs.bap
    rows = np.flatnonzero(b.frame == frame)[:n]
    node = b.node.copy()
    node[rows] = np.where(node[rows] % board.columns == 0, node[rows] + 1, node[rows] - 1)
    write_observations(folder / "observations.npz",
                       Observations(BapFeatures(b.frame, b.k, b.l, b.u, b.v, b.rho, node, b.cluster), obs.mic))


def _calibration_report(folder: Path, *, loss: str = "huber", p: float = 1e-4) -> None:
    doc = {"format": "plenocal-calibration", "version": 1, "rejected": {"bap": 15, "uv": 15, "rho": 2, "mic": 0},
           "options": {"loss": loss, "reject_probability": p}, "parameters": {}, "rmse": {}}
    (folder / "report.json").write_text(json.dumps(doc))


def test_reprojection_headline_counts_the_kept_features(tmp_path, r12a_camera, r12a_poses, r12a_board, capsys):
    """Mislinked features of a calibration frame: rejected by calibration's rule (p from the calibration
    report beside the poses), listed, counted per frame, and kept out of the headline and per-frame RMSEs."""
    _mislinked_dataset(tmp_path / "ds", r12a_camera, r12a_poses, r12a_board)
    _calibration_report(tmp_path / "ds")
    assert main(["evaluate", str(tmp_path / "ds"), "-o", str(tmp_path / "o")]) == 0
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    rej = rep["rejected"]
    assert rej["source"] == str(tmp_path / "ds" / "report.json") and rej["reject_probability"] == 1e-4
    assert rej["calibration_counts"]["bap"] == 15
    assert 15 <= rej["counts"]["bap"] <= 17 and rej["per_frame"]["4"] >= 15
    assert rep["per_frame"]["4"]["n_rejected"] == rej["per_frame"]["4"]
    assert rep["rmse"]["uv_px"] == pytest.approx(0.3 * np.sqrt(2), rel=0.06)
    assert rep["per_frame"]["4"]["rmse"]["uv_px"] < 1.0
    assert rej["rmse_all_observations"]["uv_px"] > 2 * rep["rmse"]["uv_px"]
    assert len(rej["features"]) == rej["counts"]["bap"] and sum(f["frame"] == 4 for f in rej["features"]) >= 15
    assert "features, 0 centres rejected" in capsys.readouterr().out


def test_a_linear_calibration_rejected_nothing_so_evaluation_rejects_nothing(tmp_path, r12a_camera, r12a_poses, r12a_board):
    _mislinked_dataset(tmp_path / "ds", r12a_camera, r12a_poses, r12a_board)
    _calibration_report(tmp_path / "ds", loss="linear")
    assert main(["evaluate", str(tmp_path / "ds"), "-o", str(tmp_path / "o")]) == 0
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["rejected"]["counts"]["bap"] == 0 and rep["rejected"]["reject_probability"] is None
    assert rep["rmse"]["uv_px"] > 1.0


def test_an_explicit_calibration_report_must_be_one(tmp_path, r12a_camera, r12a_poses, r12a_board, capsys):
    _dataset(tmp_path / "ds", r12a_camera, r12a_poses, r12a_board)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "plenocal-evaluation", "version": 1}))
    assert main(["evaluate", str(tmp_path / "ds"), "--calibration-report", str(other), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert str(other) in err and "is not a calibration report" in err and "\n" not in err
    assert not (tmp_path / "o").exists()


def _rewrite_manifest(folder: Path, change) -> None:
    doc = json.loads((folder / "manifest.json").read_text())
    change(doc["images"])
    (folder / "manifest.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("how", ["same file", "copy"])
def test_held_out_frames_that_are_calibration_frames_are_named(tmp_path, r12a_camera, r12a_poses, r12a_board, capfd, how):
    """A held-out frame whose image is a calibration frame's (listed under both roles, or a
    byte-identical copy) gets a warning line, in report.json and in the verdict."""
    from plenocal.viz.verdict import evaluation_findings

    ds = tmp_path / "ds"
    _dataset(ds, r12a_camera, r12a_poses, r12a_board)
    for f in CAL:
        (ds / f"cal{f}.png").write_bytes(f"calibration {f}".encode())
    (ds / "ev100.png").write_bytes(b"calibration 4" if how == "copy" else b"held out")
    (ds / "ev101.png").write_bytes(b"held out 101")
    if how == "same file":
        _rewrite_manifest(ds, lambda im: next(e for e in im if e.get("frame") == 100).update(path="cal4.png"))
    capfd.readouterr()
    assert main(["evaluate", str(ds), "-o", str(tmp_path / "out")]) == 0
    err = capfd.readouterr().err
    assert "held-out frame 100 is calibration frame 4" in err and "ev101" not in err
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [c["frame"] for c in rep["holdout"]["calibration_copies"]] == [100]
    findings, _, _ = evaluation_findings(rep, calibration_uv_px=0.4)
    assert any(f.level == "warning" and "calibration frame 4" in f.text for f in findings)


def test_translation_in_cm_and_repeated_positions_are_named(tmp_path, r12a_camera, r12a_poses, r12a_board, capfd):
    """Displacements written in cm: ε_z ~ 90 % with a line saying the unit looks wrong (an error
    in the verdict); a repeated position says which pair was left out."""
    from plenocal.viz.verdict import evaluation_findings

    ds = tmp_path / "ds"
    _dataset(ds, r12a_camera, r12a_poses, r12a_board)

    def in_cm(images):
        for e in images:
            if e.get("displacement_mm") is not None:
                e["displacement_mm"] = e["displacement_mm"] / 10.0
        next(e for e in images if e.get("frame") == 204)["displacement_mm"] = (DIST[3] - DIST[0]) / 10.0

    _rewrite_manifest(ds, in_cm)
    capfd.readouterr()
    assert main(["evaluate", str(ds), "-o", str(tmp_path / "out")]) == 0
    err = capfd.readouterr().err
    assert "look given in cm" in err and "translation frames 203 and 204 are declared at the same position" in err
    t = json.loads((tmp_path / "out" / "report.json").read_text())["translation"]
    assert t["estimated_over_declared"] == pytest.approx(10.0, rel=0.01)
    findings, _, _ = evaluation_findings({"translation": t}, calibration_uv_px=0.4)
    assert any(f.level == "error" and "cm" in f.text for f in findings)


def test_a_translation_frame_without_blur_is_left_out_of_epsilon_z(tmp_path, r12a_camera, r12a_poses, r12a_board, capsys):
    """A translation frame whose corners are single views (no ρ: each seen in one micro-image, as
    near the MLA's conjugate) has no measured depth: it is left out of ε_z and named, and the other
    frames' pairs are unchanged."""
    from plenocal.evaluate.translation import MIN_FEATURES_WITH_BLUR
    from plenocal.io.observations import read_observations

    _dataset(tmp_path / "ds", r12a_camera, r12a_poses, r12a_board)
    obs = read_observations(tmp_path / "ds" / "observations.npz")
    b = obs.bap
    # frame 204: one feature per node, ρ unknown (single views)
    first = np.zeros(len(b), dtype=bool)
    rows = np.flatnonzero(b.frame == 204)
    _, idx = np.unique(b.node[rows], return_index=True)
    first[rows[idx]] = True
    keep = (b.frame != 204) | first
    rho = np.where(b.frame == 204, np.nan, b.rho)
    write_observations(tmp_path / "ds" / "observations.npz",
                       Observations(BapFeatures(b.frame[keep], b.k[keep], b.l[keep], b.u[keep], b.v[keep], rho[keep],
                                                b.node[keep], np.where(b.frame == 204, -1, b.cluster)[keep]), obs.mic))
    assert (rows.size - idx.size) > 0 and idx.size >= MIN_FEATURES_WITH_BLUR
    assert main(["evaluate", str(tmp_path / "ds"), "-o", str(tmp_path / "o")]) == 0
    t = json.loads((tmp_path / "o" / "report.json").read_text())["translation"]
    assert [d["frame"] for d in t["frames_without_depth"]] == [204]
    assert 204 in t["frames_evaluated"] and t["epsilon_z_percent"]["n_pairs"] == 6  # pairs of 200..203
    assert 0 < t["epsilon_z_percent"]["mean"] < 0.5
    assert "frames [204] left out" in capsys.readouterr().out
    from plenocal.viz.verdict import evaluation_findings

    findings, _, _ = evaluation_findings(json.loads((tmp_path / "o" / "report.json").read_text()), calibration_uv_px=None)
    assert any("translation frame 204 left out of ε_z" in f.text for f in findings)
