"""The lattice parity of libpleno's MLA space (reference §2.2, §15 item 6): a hexagonal lattice with
H − 1 even (W − 1 for columns-aligned) is exported with one row (column) added beyond the last;
the default r12-b preset (176 x 153) exports, and import restores it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from plenocal.errors import InputFileError
from plenocal.io import libpleno as lp
from plenocal.io.libpleno.convert import Generation
from plenocal.io.libpleno.head import lens_centres, mesh_nodes
from plenocal.model.projection import micro_lens_centres
from plenocal.sim import preset


@pytest.fixture(scope="module")
def r12b_default():
    """The default r12-b preset: a 176 x 153 lattice."""
    return preset("r12-b").camera


# --- the 153-row lattice ------------------------------------------------------------------
@pytest.mark.parametrize("generation", list(Generation))
def test_r12b_153_rows_export(tmp_path: Path, r12b_default, generation):
    """One row is added beyond the last: libpleno's MLA-space reading of the file puts every lens and
    micro-image where plenocal's camera has it; the added row's micro-images are off the sensor;
    import removes the row again."""
    cam = r12b_default
    assert (cam.mla.lattice.width, cam.mla.lattice.height) == (176, 153)
    path = lp.write_intrinsics(tmp_path / "intrinsics.js", cam, generation=generation)
    raw = json.loads(path.read_text())
    assert raw["plenocal_lattice"] == {"width": "176", "height": "153"}
    doc = lp.read_camera_config(path)
    assert (doc.mla.width, doc.mla.height) == (doc.mia.width, doc.mia.height) == (176, 154)
    k, l = cam.mla.lattice.all_indices()
    W, H = doc.mla.width, doc.mla.height
    np.testing.assert_allclose(lens_centres(doc, W - 1 - k, H - 1 - l), micro_lens_centres(cam, k, l), rtol=0, atol=1e-12)
    x, y = mesh_nodes(doc.mia, k, l)
    R, t = np.asarray(doc.mia.pose.rotation), np.asarray(doc.mia.pose.translation)
    np.testing.assert_allclose(np.column_stack([x, y]) @ R.T + t, cam.grid.centres(k, l), rtol=0, atol=1e-9)
    # the added row: its micro-images lie wholly below the last pixel row
    extra = np.arange(W)
    ex, ey = mesh_nodes(doc.mia, extra, np.full(W, H - 1))
    assert (np.column_stack([ex, ey]) @ R.T + t)[:, 1].min() - cam.grid.diameter_px / 2 > cam.sensor.height_px - 0.5
    back = lp.camera_from_intrinsics(path)
    assert back.mla.lattice == cam.mla.lattice and back.grid.lattice == cam.mla.lattice
    np.testing.assert_allclose(back.mla.translation_mm, cam.mla.translation_mm, rtol=0, atol=1e-13)
    np.testing.assert_allclose(micro_lens_centres(back, k, l), micro_lens_centres(cam, k, l), rtol=0, atol=1e-12)


def test_r12b_153_rows_unpadded_is_another_lattice(tmp_path: Path, r12b_default):
    """Why the row is added: written with 153 rows, libpleno's MLA space would put every lens of an
    even row one pitch away from its micro-image's lens; such a file is refused on import."""
    doc = lp.config_from_camera(r12b_default)
    wrong = dataclasses.replace(
        doc, mla=dataclasses.replace(doc.mla, height=153), mia=dataclasses.replace(doc.mia, height=153), extra={}
    )
    k, l = r12b_default.mla.lattice.all_indices()
    # translation of the 153-row reading chosen so that odd rows fit: even rows are off by p0
    shift = lens_centres(wrong, 175 - k, 152 - l) - micro_lens_centres(r12b_default, k, l)
    odd = l % 2 == 1
    shift = shift - shift[odd][0]
    np.testing.assert_allclose(np.abs(shift[odd]).max(), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.hypot(shift[~odd, 0], shift[~odd, 1]), r12b_default.mla.pitch_mm[0], rtol=1e-9)
    path = lp.write_camera_config(tmp_path / "intrinsics.js", wrong)
    with pytest.raises(InputFileError, match="153 rows"):
        lp.camera_from_intrinsics(path)


@pytest.mark.parametrize(
    "value, message",
    [({"width": "176", "height": "152"}, "less its padding"), ({"width": "176"}, "must be"), ("x", "must be")],
)
def test_bad_plenocal_lattice_key(tmp_path: Path, r12b_default, value, message):
    path = lp.write_intrinsics(tmp_path / "intrinsics.js", r12b_default)
    raw = json.loads(path.read_text())
    raw["plenocal_lattice"] = value
    path.write_text(json.dumps(raw))
    with pytest.raises(InputFileError, match=message):
        lp.camera_from_intrinsics(path)


def test_hex_columns_padding(tmp_path: Path, r12a_camera):
    from plenocal.model.camera import MicroLensArray, consistent_mia
    from plenocal.model.lattice import Lattice, LatticeKind

    mla = r12a_camera.mla
    cam = r12a_camera.replace(
        mla=MicroLensArray(Lattice(LatticeKind.HEX_COLS, 151, 176), mla.pitch_mm, (1e-3, -2e-3, 0.01),
                           mla.translation_mm, mla.focal_lengths_mm, mla.types),
        mia=None,
    )
    cam = cam.replace(mia=consistent_mia(cam))
    assert lp.libpleno_lattice(cam.mla.lattice) == Lattice(LatticeKind.HEX_COLS, 152, 176)
    doc = lp.config_from_camera(cam, generation=Generation.HEAD)
    k, l = cam.mla.lattice.all_indices()
    np.testing.assert_allclose(lens_centres(doc, 151 - k, 175 - l), micro_lens_centres(cam, k, l), rtol=0, atol=1e-12)
    back = lp.camera_from_config(doc)
    assert back.mla.lattice == cam.mla.lattice
    np.testing.assert_allclose(back.mla.translation_mm, cam.mla.translation_mm, rtol=0, atol=1e-13)


def test_import_libpleno_of_padded_export(tmp_path: Path, r12b_default):
    """import-libpleno of an exported folder (intrinsics.js, params.js, scene.js; no camera.js):
    the manifest's lattice and the camera's are plenocal's 176 x 153, not the file's 154 rows."""
    from plenocal.io import read_camera_file, read_manifest
    from plenocal.io.libpleno.importer import import_libpleno_folder
    from plenocal.model.target import Checkerboard

    src = tmp_path / "src"
    lp.write_intrinsics(src / "intrinsics.js", r12b_default, generation=Generation.HEAD)
    lp.write_scene(src / "scene.js", Checkerboard(8, 5, 20.0))
    import_libpleno_folder(src, tmp_path / "ds", name="r12b")
    manifest = read_manifest(tmp_path / "ds" / "manifest.json")
    camera = read_camera_file(tmp_path / "ds" / "camera.json").camera
    assert manifest.camera_spec.lattice == camera.mla.lattice == r12b_default.mla.lattice
