"""``plenocal report``: one self-contained HTML page from partial and full stage outputs; it loads in
headless Chromium with every image and no console error."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from plenocal.cli.main import main
from plenocal.viz import save_figure
from plenocal.viz.calibration import kappa_figure

DEBIAN_CHROMIUM = "/usr/bin/chromium"


def _find_chromium() -> str | None:
    """Chromium in PATH, else Debian's ``/usr/bin/chromium`` (a PATH may lack /usr/bin)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    return DEBIAN_CHROMIUM if os.access(DEBIAN_CHROMIUM, os.X_OK) else None


CHROMIUM = _find_chromium()


def _kappa_doc() -> dict:
    k = np.linspace(0.0, 2.0, 21)
    return {
        "format": "plenocal-kappa", "version": 1, "plenocal_version": "0.1.0", "kappa": 0.6371,
        "cost": 238.2, "cost_no_blur": 390.0, "n_pairs": 459,
        "per_frame": {"1": {"kappa": 0.61, "n_pairs": 200, "cost": 1.0}, "3": {"kappa": 0.65, "n_pairs": 259, "cost": 1.0}},
        "spread": {"mean": 0.63, "std": 0.028, "min": 0.61, "max": 0.65},
        "curve": {"kappa": k.tolist(), "cost": (390 * (1 - 0.4 * np.exp(-((k - 0.64) ** 2) / 0.2))).tolist()},
        "inputs": {"camera": {"path": "camera.json", "sha256": "ab" * 32}},
        "settings": {"window_px": 9},
    }


@pytest.fixture
def full_out(tmp_path, libpleno_src, r12a_camera):
    """OUT with every stage's output: calibration, camera, poses, observations, evaluation, κ, profile."""
    ds = tmp_path / "dataset"
    assert main(["import-libpleno", str(libpleno_src), "-o", str(ds)]) == 0
    out = tmp_path / "out"
    out.mkdir()
    for name in ("camera.json", "poses.json", "observations.npz"):
        shutil.copy(ds / name, out / name)
    names = ["F_mm", "D_mm", "d_mm", "f1_mm"]
    corr = np.eye(4)
    corr[0, 1] = corr[1, 0] = 0.97
    corr[2, 3] = corr[3, 2] = -0.5
    calib = {
        "rmse": {"uv_px": 0.31, "rho_px": 0.08, "mic_px": 0.34}, "sum_squared_residuals": 412.5, "n_bap": 2160,
        "n_mic": 456, "converged": True, "iterations": 12, "wall_time_s": 3.2,
        "parameters": {"F_mm": {"value": 49.71, "std": 0.01}, "D_mm": {"value": 56.7, "std": 0.02},
                       "d_mm": {"value": 0.3248, "std": 1e-4}, "f1_mm": {"value": 0.578, "std": None, "frozen": True}},
        "correlation": {"names": names, "matrix": corr.tolist()},
        "inputs": {"dataset": str(ds)},
        "options": {"loss": "huber"},
    }
    (out / "report.json").write_text(json.dumps(calib))
    (out / "eval").mkdir()
    evaluation = {
        "format": "plenocal-evaluation", "version": 1, "plenocal_version": "0.1.0",
        "rmse": {"uv_px": 0.4, "rho_px": 0.1},
        "per_frame": {str(f): {"n_bap": 10, "rmse": {"uv_px": 0.3 + 0.01 * f, "rho_px": 0.1, "bap_px": 0.35}} for f in range(5)},
        "translation": {"by_displacement": [{"displacement_mm": 10.0 * i, "mean_percent": 1.0 / i, "std_percent": 0.1, "n_pairs": 3}
                                            for i in range(1, 6)]},
    }
    (out / "eval" / "report.json").write_text(json.dumps(evaluation))
    (out / "kappa.json").write_text(json.dumps(_kappa_doc()))
    save_figure(kappa_figure(_kappa_doc()), out / "kappa", formats=("png",))
    assert main(["profile", str(out / "camera.json"), "-o", str(out / "profile")]) == 0
    return out


def test_full_report_embeds_every_figure_and_flags_correlations(full_out, capsys):
    assert main(["report", str(full_out)]) == 0
    page = (full_out / "report.html").read_text()
    imgs = re.findall(r'<img src="([^"]+)"', page)
    # residual map, histograms, coverage, per-frame RMSE, ε_z, poses 3-D, kappa.png, profile.png
    assert len(imgs) == 8
    assert "Coverage: where the calibration is supported by observations" in page
    assert all(src.startswith("data:image/png;base64,") for src in imgs)
    assert "http://" not in page and "https://" not in page
    assert page.count("|r| &gt; 0.9") == 2  # F and D
    assert "+0.9700" in page and "-0.5000" not in page
    assert "0.6371" in page and "14.4" in page
    assert "calibration summary omitted" not in page
    assert "huber" in page  # settings
    # The verdict leads the page: status, intrinsics rounded to σ, RMSEs; an older file has one σ.
    assert page.index('id="verdict"') < page.index('id="figures"') < page.index('id="calibration"')
    verdict = page[page.index('id="verdict"'):page.index('id="figures"')]
    assert 'data-status="calibrated"' in verdict and "49.710 ± 0.010" in verdict
    assert "σ (frames)" not in page and "no frame-resampling σ (an older file)" in page


def test_report_shows_frame_resampling_sigma_and_flags_disagreement(full_out):
    """A hand-made report.json with parameters.<name>.std_frames (beside the Jacobian std)."""
    doc = json.loads((full_out / "report.json").read_text())
    doc["parameters"] = {
        "F_mm": {"value": 49.7169669, "std": 0.0374, "std_frames": 0.19},  # 5.1×: flagged, 0.19 used
        "D_mm": {"value": 56.7021448, "std": 0.0427, "std_frames": 0.05},  # 1.2×
        "d_mm": {"value": 0.3255365, "std": 0.000239},  # no resampling σ for this one
    }
    doc["correlation"] = {"names": ["F_mm", "D_mm", "d_mm"], "matrix": np.eye(3).tolist()}
    (full_out / "report.json").write_text(json.dumps(doc))
    assert main(["report", str(full_out)]) == 0
    page = (full_out / "report.html").read_text()
    table = page[page.index("<h3>Parameters ± σ</h3>"):]
    table = table[:table.index("</table>")]
    assert "<th>σ (Jacobian)</th><th>σ (frames)</th>" in table
    rows = {r.split("</td>")[0]: r for r in re.findall(r"<tr><td>(.*?)</tr>", table)}
    f_row = next(v for k, v in rows.items() if k.startswith("F_mm"))
    assert "σ differ 5.1×" in f_row and "<td>49.72</td><td>0.037</td><td>0.19</td>" in f_row
    d_row = next(v for k, v in rows.items() if k.startswith("d_mm"))
    assert "σ differ" not in d_row and "<td>325.54</td><td>0.24</td><td>—</td>" in d_row
    verdict = page[page.index('id="verdict"'):page.index('id="figures"')]
    assert 'data-status="calibrated with warnings"' in verdict
    assert "49.72 ± 0.19" in verdict and "F_mm: the two σ disagree by 5.1×" in verdict


def test_partial_report_notes_what_is_missing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "kappa.json").write_text(json.dumps(_kappa_doc()))
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "no calibration report" in page and "no evaluation report" in page and "no profile.json" in page
    assert len(re.findall(r"<img ", page)) == 0


def test_report_of_an_empty_folder_is_one_line_and_writes_nothing(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"plenocal report: error: {tmp_path}: holds no plenocal stage output (precalibration.json, report.json, kappa.json, profile.json, ...)"
    assert not (tmp_path / "report.html").exists()


@pytest.fixture
def chromium() -> str:
    """The browser; optional for users (skipped without it), required in CI (``.ci/run`` installs it)."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run should have installed it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return CHROMIUM


def _chromium_dom(chromium: str, page: Path) -> tuple[str, str]:
    proc = subprocess.run(
        [chromium, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    return proc.stdout, proc.stderr


def _console_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]


def test_report_loads_in_headless_chromium_with_every_image(chromium, full_out, tmp_path):
    assert main(["report", str(full_out)]) == 0
    dom, err = _chromium_dom(chromium, full_out / "report.html")
    m = re.search(r'<body[^>]*data-broken-images="(\d+)"[^>]*data-images="(\d+)"', dom)
    assert m is not None, dom[:500]
    assert (int(m.group(1)), int(m.group(2))) == (0, 8)
    assert _console_errors(err) == []
    # The verdict is rendered, visible, and at the top of the page (within the first screen).
    v = re.search(r'<body[^>]*data-verdict="(\w+)"[^>]*data-verdict-top="(-?\d+)"', dom)
    assert v is not None and v.group(1) == "visible" and 0 < int(v.group(2)) < 400
    assert re.search(r'<div class="status ok"><span class="badge">calibrated</span>', dom)
    # The check can fail: a broken image and a script error are seen.
    bad = tmp_path / "bad.html"
    page = (full_out / "report.html").read_text().replace("</body>", '<img src="data:image/png;base64,AAAA"><script>undefinedCall();</script></body>')
    bad.write_text(page)
    dom, err = _chromium_dom(chromium, bad)
    assert 'data-broken-images="1"' in dom
    assert any("undefinedCall" in ln for ln in _console_errors(err))
    # ... and so is a hidden verdict.
    hidden = tmp_path / "hidden.html"
    hidden.write_text((full_out / "report.html").read_text().replace("</style>", "#verdict{display:none}</style>"))
    dom, _ = _chromium_dom(chromium, hidden)
    assert 'data-verdict="missing"' in dom


def test_report_names_depth_frames_near_the_mla_conjugate_plane(tmp_path):
    """A frame whose textured micro-images are mostly at |υ| = 2 (status at_limit) is named, with
    its count; a frame with a few is not (the PRISM frames: ≤ 1 %)."""
    from plenocal.viz.report import build_report

    (tmp_path / "depth").mkdir()
    frames = {"210": {"counts": {"estimated": 545, "at_limit": 0}, "textured": 545, "z_percentiles_mm": {"50": 367.2}},
              "211": {"counts": {"estimated": 8, "at_limit": 442}, "textured": 450, "z_percentiles_mm": {"50": 374.8}},
              "100": {"counts": {"estimated": 17000, "at_limit": 174}, "textured": 16865, "z_percentiles_mm": {"50": 450.0}}}
    (tmp_path / "depth" / "depth.json").write_text(json.dumps({"format": "plenocal-depth", "version": 1, "frames": frames}))
    page, _ = build_report(tmp_path)
    assert "Near the plane conjugate to the micro-lens array</b>, frames 211 (442 of 450):" in page
    assert "(|υ| &lt; 2 cannot be estimated)" in page and "210 (" not in page and "100 (" not in page


def test_report_names_the_frames_that_extrapolate_the_depth_scaling(tmp_path):
    """depth.json's per-frame scaling entries: the frames flagged as extrapolated are named in one
    line per side, with the console's wording (depth.scaling.extrapolation_text); the others not."""
    from plenocal.viz.report import build_report

    (tmp_path / "depth").mkdir()
    base = {"support_w": [0.099, 0.214], "calibration_sigma_percent": [0.2, 0.41], "calibration_z_mm": [994.0, 2493.0]}
    frames = {"200": {"counts": {"estimated": 16934}, "textured": 23788, "z_percentiles_mm": {"50": 407.1},
                      "scaling": {**base, "w_matched_median": 0.0399, "correction_sigma_percent": 1.9, "extrapolated": "nearer"}},
              "212": {"counts": {"estimated": 8323}, "textured": 14404, "z_percentiles_mm": {"50": 1001.7},
                      "scaling": {**base, "w_matched_median": 0.0904, "correction_sigma_percent": 0.5, "extrapolated": None}}}
    (tmp_path / "depth" / "depth.json").write_text(json.dumps({"format": "plenocal-depth", "version": 1, "frames": frames}))
    page, _ = build_report(tmp_path)
    assert page.count("Depth scaling extrapolated:") == 1
    assert "frame 200: depths nearer than every calibration frame" in page
    assert "(1/υ 0.0399 against 0.099–0.214" in page and "its own σ 1.9 % of 1/υ against 0.2–0.41 %" in page and "frame 212" not in page


def test_report_shows_the_per_pixel_depth_map_when_depth_wrote_one(tmp_path):
    """``plenocal depth --per-pixel`` writes frame-<id>-depth-pixels.png: the report shows it."""
    from plenocal.viz.report import build_report

    (tmp_path / "depth").mkdir()
    frames = {"7": {"counts": {"estimated": 10, "at_limit": 0}, "textured": 10, "z_percentiles_mm": {"50": 300.0}}}
    (tmp_path / "depth" / "depth.json").write_text(json.dumps({"format": "plenocal-depth", "version": 1, "frames": frames}))
    png = tmp_path / "depth" / "depth" / "frame-7-depth-pixels.png"
    png.parent.mkdir()
    import cv2

    ok, buf = cv2.imencode(".png", np.full((4, 5), 128, dtype=np.uint8))
    assert ok
    png.write_bytes(buf.tobytes())
    page, _ = build_report(tmp_path)
    assert "frame 7: depth per pixel" in page
