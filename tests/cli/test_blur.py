"""``plenocal blur``: κ from a small ray-traced R12-A dataset, and its input errors."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.sim.dataset import FrameSelection, simulate_dataset
from plenocal.sim.presets import preset


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory, kappa_range_mm):
    out = tmp_path_factory.mktemp("r12a-blur")
    p = preset("r12-a", small=True)
    # frames where the 9 px windows hold the blur (the kappa_range_mm fixture)
    p = dataclasses.replace(p, plan=dataclasses.replace(p.plan, calibration_range_mm=kappa_range_mm))
    simulate_dataset(p, out, seed=3, rays=48,
                     frames=FrameSelection.parse("devignetting,calibration=8"))
    shutil.copy(out / "ground_truth" / "camera.json", out / "camera.json")
    return out


def test_blur_cli_writes_kappa_near_the_disc_psf_value(small_dataset, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["blur", str(small_dataset), "--observations", str(small_dataset / "ground_truth" / "observations.npz"),
               "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((out / "kappa.json").read_text())
    assert doc["format"] == "plenocal-kappa"
    # Disc PSFs with photon/read noise: κ ≈ 0.6 (tests/blur/test_kappa.py explains why not 0.5).
    assert 0.55 < doc["kappa"] < 0.72
    assert doc["n_pairs"] == sum(f["n_pairs"] for f in doc["per_frame"].values()) > 60
    assert doc["settings"]["devignetted"] is True
    assert doc["cost"] < doc["cost_no_blur"]
    assert len(doc["inputs"]["images"]) == 8 and all(len(v["sha256"]) == 64 for v in doc["inputs"]["images"].values())
    for stem in ("kappa", "relative_blur"):
        assert (out / f"{stem}.png").is_file() and (out / f"{stem}.svg").is_file()
    assert "κ = " in capsys.readouterr().out


def test_blur_without_observations_is_one_line_and_writes_nothing(small_dataset, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["blur", str(small_dataset), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"plenocal blur: error: {small_dataset}: no observations in the dataset; pass --observations"
    assert not out.exists()


def test_blur_with_a_single_type_camera_is_refused(small_dataset, tmp_path, capsys):
    text = (small_dataset / "camera.json").read_text()
    doc = json.loads(text)
    doc["mla"]["focal_lengths_mm"] = doc["mla"]["focal_lengths_mm"][:1]
    cam = tmp_path / "one-type.json"
    cam.write_text(json.dumps(doc))
    out = tmp_path / "out"
    rc = main(["blur", str(small_dataset), "--camera", str(cam),
               "--observations", str(small_dataset / "ground_truth" / "observations.npz"), "-o", str(out)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert str(cam) in err and "\n" not in err
    assert not out.exists()


def test_frames_are_read_once_each_in_order_and_devignetted_like_the_white_rule():
    """The blur command holds one or two images, not the set: each frame is read once (the next
    one while the current is used), and devignetted as image / white where the white is lit."""
    from concurrent.futures import ThreadPoolExecutor

    from plenocal.cli.blur import MIN_WHITE, _DevignettedFrames

    rng = np.random.default_rng(0)
    white = rng.uniform(0.0, 1.0, (6, 7))
    white[0, :] = 0.5 * MIN_WHITE  # the gaps between micro-images
    raw = {f: rng.uniform(0.0, 1.0, (6, 7)) for f in (3, 5, 9)}
    reads: list[int] = []

    class Stub:
        def read_image(self, entry):
            reads.append(entry)
            return raw[entry]

    with ThreadPoolExecutor(max_workers=1) as reader:
        images = _DevignettedFrames(Stub(), {f: f for f in raw}, white, reader)
        assert list(images) == [3, 5, 9] and len(images) == 3
        for f in images:
            lit = white >= MIN_WHITE * white.max()
            np.testing.assert_array_equal(images[f], np.where(lit, raw[f] / np.where(lit, white, 1.0), 0.0))
        with pytest.raises(KeyError):
            images[4]
    assert reads == [3, 5, 9]
