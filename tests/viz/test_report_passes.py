"""The report reads a stage's latest pass: ``plenocal run`` writes ``detection`` then
``detection-pass2``, and ``calibration-pass1`` then ``calibration``."""

from __future__ import annotations

import json

from plenocal.viz.report import collect


def _write(folder, name, doc):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc), encoding="utf-8")


def test_latest_pass_of_each_stage_is_read(tmp_path):
    _write(tmp_path / "detection", "detection.json", {"format": "plenocal-detection", "pass": 1})
    _write(tmp_path / "detection-pass2", "detection.json", {"format": "plenocal-detection", "pass": 2})
    _write(tmp_path / "calibration-pass1", "report.json", {"parameters": {}, "rmse": {}, "pass": 1})
    _write(tmp_path / "calibration", "report.json", {"parameters": {}, "rmse": {}, "pass": 2})
    c = collect(tmp_path)
    assert c.documents["detection"][1]["pass"] == 2
    assert c.documents["calibration"][1]["pass"] == 2
    # a single pass is read wherever it is
    single = tmp_path / "single"
    _write(single / "detection", "detection.json", {"format": "plenocal-detection", "pass": 1})
    assert collect(single).documents["detection"][1]["pass"] == 1
