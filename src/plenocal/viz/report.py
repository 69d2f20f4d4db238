"""One self-contained HTML page from whatever stage outputs exist in an output folder.

Reads (each optional; a missing or unreadable part is omitted with a note): ``precalibration.json``
(+ ``radii.png``, ``centres.png``), ``detection.json``, the calibration's ``report.json``
(``parameters`` {name: {value, std, std_frames}}, ``correlation`` {names, matrix}, ``rmse``,
``rejected``...), ``camera.json``, ``poses.json``, the evaluation's ``report.json`` (kept and
rejected observations, ``per_frame``, held-out, ε_z ``by_displacement``), ``kappa.json`` (+ figures)
and ``profile.json`` (+ figure), in OUT and its direct sub-folders.

The page leads with the verdict (:mod:`plenocal.viz.verdict`): a status line (calibrated /
calibrated with warnings / not trustworthy) and its reasons, the camera, the intrinsics rounded to
their σ, the RMSEs of the kept observations, what was rejected and why, and every stage's warnings
and notes; then the figures, then the details. Figures are embedded as base64 PNG; the page
references no external URL.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from plenocal import __version__

CORRELATION_FLAG = 0.9
"""Parameter pairs with |correlation| above this are flagged."""

STAGE_IMAGES = (
    ("radii", "Micro-image radii versus 1/N (paper fig:radii)"),
    ("centres", "Micro-image centres on a white image"),
    ("kappa", "Relative blur cost Θ(κ) and κ per frame"),
    ("relative_blur", "Relative blur of one pair (paper fig:blur)"),
    ("profile", "Blur profile and depths of field (paper fig:blurprofileobj)"),
)
FORMATS = {
    "plenocal-precalibration": "precalibration",
    "plenocal-detection": "detection",
    "plenocal-evaluation": "evaluation",
    "plenocal-calibration": "calibration",
    "plenocal-kappa": "kappa",
    "plenocal-profile": "profile",
    "plenocal-poses": "poses",
    "plenocal-camera": "camera",
    "plenocal-depth": "depth",
}

DEPTH_MAPS_SHOWN = 4
"""Depth maps embedded in the report, each with its all-in-focus image (the first frames'; at full
scale ~0.4 MB per depth map, 0.19–0.26 MB per all-in-focus image of the PRISM board); the others are
named by path."""


@dataclass
class Collected:
    """The stage outputs found in a folder: documents by kind (with their paths), images, notes."""

    folder: Path
    documents: dict[str, tuple[Path, dict[str, Any]]] = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _kind(doc: dict[str, Any]) -> str | None:
    fmt = doc.get("format")
    if isinstance(fmt, str) and fmt in FORMATS:
        return FORMATS[fmt]
    if "parameters" in doc and "rmse" in doc:  # the calibration report.json
        return "calibration"
    return None


def _latest_pass_first(dirs: list[Path]) -> list[Path]:
    """Sub-folders in name order, but a stage's later pass before its earlier one: ``X-passN`` is
    pass N, and a plain ``X`` is pass 1 unless an ``X-pass1`` beside it makes it the final pass
    (``plenocal run``: ``detection`` then ``detection-pass2``; ``calibration-pass1`` then
    ``calibration``)."""
    names = {d.name for d in dirs}

    def key(d: Path) -> tuple[str, int]:
        m = re.fullmatch(r"(.+)-pass(\d+)", d.name)
        if m:
            return m.group(1), -int(m.group(2))
        later = [int(m2.group(1)) for n in names if (m2 := re.fullmatch(re.escape(d.name) + r"-pass(\d+)", n))]
        return d.name, -(max(later) + 1 if 1 in later else 1)

    return sorted(dirs, key=key)


def collect(folder: Path) -> Collected:
    """Find every known stage output in ``folder`` and its direct sub-folders (nearest first; of
    a stage run in passes, the latest: :func:`_latest_pass_first`)."""
    c = Collected(Path(folder))
    dirs = [c.folder, *_latest_pass_first([p for p in c.folder.iterdir() if p.is_dir()])]
    for d in dirs:
        for path in sorted(d.glob("*.json")):
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, huge ints
                c.notes.append(f"{path.name}: skipped, unreadable ({type(exc).__name__})")
                continue
            if not isinstance(doc, dict):
                continue
            kind = _kind(doc)
            if kind is not None and kind not in c.documents:
                c.documents[kind] = (path, doc)
        for stem, _ in STAGE_IMAGES:
            p = d / f"{stem}.png"
            if stem not in c.images and p.is_file():
                c.images[stem] = p
    return c


def _png_data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _figure_uri(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return _png_data_uri(buf.getvalue())


def _fmt(x: Any, digits: int = 6) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int | float):
        if isinstance(x, float) and not math.isfinite(x):
            return "∞" if x > 0 else "−∞" if x < 0 else "—"
        return f"{x:.{digits}g}"
    return html.escape(str(x))


def _table(header: list[str], rows: list[list[str]], *, cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _figure_html(uri: str, caption: str) -> str:
    return f'<figure><img src="{uri}" alt="{html.escape(caption)}"><figcaption>{html.escape(caption)}</figcaption></figure>'


def strong_correlations(correlation: Any, threshold: float = CORRELATION_FLAG) -> list[tuple[str, str, float]]:
    """Parameter pairs with |r| > threshold from ``{"names": [...], "matrix": [[...]]}``, strongest first."""
    if not isinstance(correlation, dict):
        return []
    names, matrix = correlation.get("names"), correlation.get("matrix")
    try:
        m = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        return []
    if not isinstance(names, list) or m.shape != (len(names), len(names)):
        return []
    i, j = np.triu_indices(len(names), k=1)
    r = m[i, j]
    keep = np.isfinite(r) & (np.abs(r) > threshold)
    order = np.argsort(-np.abs(r[keep]))
    return [(str(names[a]), str(names[b]), float(v)) for a, b, v in zip(i[keep][order], j[keep][order], r[keep][order], strict=True)]


def _find_key(doc: Any, key: str) -> Any:
    """First value of ``key`` anywhere in a JSON tree (depth first)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for v in doc.values():
            found = _find_key(v, key)
            if found is not None:
                return found
    elif isinstance(doc, list):
        for v in doc:
            found = _find_key(v, key)
            if found is not None:
                return found
    return None


def _section(title: str, body: str, anchor: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{body}</section>'


def _percent(x: float) -> str:
    """2 significant digits below 100 %, whole percents above (180 %, not 1.8e+02 %)."""
    return f"{x:.2g} %" if abs(x) < 100 else f"{x:.0f} %"


def _sigma_text(sigma: float | None, factor: float) -> str:
    """σ to 2 significant digits in fixed notation (as beside a value rounded to it)."""
    from plenocal.viz.verdict import round_to_sigma

    return html.escape(round_to_sigma(0.0, sigma * factor)[1]) if sigma is not None else "—"


def _model_selection_html(selection: Any) -> str:
    """The main-lens model the data chose (calibration's ``model_selection``): each real-lens term,
    kept or left out, with its Wald statistic and threshold; empty when none was left to the data."""
    if not isinstance(selection, dict) or not selection:
        return ""
    words = {"exit_pupil": "exit pupil e (micro-image centres projected from it)",
             "depth_distortion": "depth distortion Z1·r² + Z2·r⁴ (a curved field)"}
    rows = [[html.escape(words.get(t, t)), "kept" if ev.get("kept") else "left out (the paper's thin lens)",
             html.escape(str(ev.get("reason", "")))] for t, ev in selection.items() if isinstance(ev, dict)]
    return ("<h3>Main-lens model chosen by the data</h3>" + _table(["term", "", "why"], rows)
            + '<p class="src">A term is kept when its Wald statistic against the thin lens exceeds the χ² '
              "quantile at a 0.1 % false-alarm rate (docs/model.md, \"A real main lens\").</p>")


def _calibration_section(c: Collected) -> str:
    """Every parameter rounded to its (larger) σ, both σ when calibration wrote the frame-resampling
    one, the flags, and the correlations above :data:`CORRELATION_FLAG`."""
    from plenocal.viz.verdict import SIGMA_DISAGREEMENT, display_unit, parameter_sigmas, round_to_sigma

    if "calibration" not in c.documents:
        c.notes.append("no calibration report (report.json with parameters): calibration summary omitted")
        return ""
    path, doc = c.documents["calibration"]
    cam = c.documents.get("camera", (None, None))[1]
    parts = []
    rmse = doc.get("rmse") if isinstance(doc.get("rmse"), dict) else {}
    summary = [[html.escape(k), _fmt(v, 4)] for k, v in rmse.items()]
    for key in ("n_bap", "n_mic", "n_frames", "converged", "iterations", "sum_squared_residuals", "wall_time_s"):
        if key in doc:
            summary.append([key, _fmt(doc[key], 6)])
    parts.append(_table(["quantity (kept observations)", "value"], summary))
    parts.append(_model_selection_html(doc.get("model_selection")))
    sigmas = parameter_sigmas(doc, cam)
    with_frames = any(p.std_frames is not None for p in sigmas.values())
    strong = strong_correlations(doc.get("correlation"))
    flagged = {n for a, b, _ in strong for n in (a, b)}
    rows = []
    for name, p in sigmas.items():
        _, unit, factor = display_unit(name, p.value if p.value is not None else float("nan"))
        value, _ = round_to_sigma((p.value * factor) if p.value is not None else float("nan"),
                                  p.sigma * factor if p.sigma is not None else None)
        flags = []
        if name in flagged:
            flags.append('<span class="flag">|r| &gt; 0.9</span>')
        if p.disagreement is not None and p.disagreement > SIGMA_DISAGREEMENT:
            flags.append(f'<span class="flag">σ differ {p.disagreement:.1f}×</span>')
        row = [html.escape(name) + (" (frozen)" if p.frozen else "") + (" " + " ".join(flags) if flags else ""),
               html.escape(unit), html.escape(value), _sigma_text(p.std, factor)]
        if with_frames:
            row.append(_sigma_text(p.std_frames, factor))
        rows.append([*row, _percent(p.relative * 100) if p.relative is not None else "—"])
    if rows:
        header = ["parameter", "unit", "value (rounded to σ)", "σ (Jacobian)", *(["σ (frames)"] if with_frames else []), "σ/|value|"]
        note = ("<p class=\"src\">Values are rounded to the larger σ (2 significant digits)."
                + (f" Parameters whose two σ differ by more than {SIGMA_DISAGREEMENT:g}× are flagged." if with_frames else
                   " This calibration has no frame-resampling σ (an older file): σ is the Jacobian's only.") + "</p>")
        parts.append("<h3>Parameters ± σ</h3>" + _table(header, rows, cls="params") + note)
    if strong:
        crow = [[html.escape(a), html.escape(b), f"{r:+.4f}"] for a, b, r in strong]
        parts.append(f"<h3>Correlations above {CORRELATION_FLAG}</h3>" + _table(["parameter", "parameter", "r"], crow, cls="corr"))
    elif sigmas:
        parts.append(f"<p>No parameter pair is correlated above {CORRELATION_FLAG}.</p>")
    parts.append(f'<p class="src">from {html.escape(str(path))}</p>')
    return _section("Calibration: every parameter", "".join(parts), "calibration")


@dataclass
class ResidualData:
    """Residuals of the calibration frames with the calibrated camera and poses, split like calibration."""

    camera: Any
    residuals: Any
    split: Any
    observations: Any
    poses: Any
    board: Any


def _residual_data(c: Collected) -> ResidualData | None:
    """Camera, poses, observations and the dataset's target beside the calibration report, their
    residuals and calibration's kept/rejected split (rule: :mod:`plenocal.evaluate.outliers`)."""
    from plenocal.errors import PlenocalError

    if "calibration" not in c.documents:
        return None
    report_path, doc = c.documents["calibration"]
    dataset = _find_key(doc, "dataset")
    # camera.json and poses.json sit beside the calibration report (OUT/ or OUT/calibration/).
    base = Path(report_path).parent
    cam_path, poses_path = base / "camera.json", base / "poses.json"
    obs_candidates = [base / "observations.npz", c.folder / "observations.npz"]
    recorded = _find_key(doc, "observations")
    if isinstance(recorded, str):
        obs_candidates.insert(0, Path(recorded))
    if isinstance(dataset, str):
        obs_candidates.append(Path(dataset) / "observations.npz")
    obs_path = next((p for p in obs_candidates if p.is_file()), None)
    if not (isinstance(dataset, str) and cam_path.is_file() and poses_path.is_file() and obs_path is not None):
        c.notes.append("residual maps and coverage omitted: they need camera.json, poses.json, observations and the dataset (inputs.dataset)")
        return None
    try:
        from plenocal.evaluate.metrics import compute_residuals
        from plenocal.evaluate.outliers import DEFAULT_REJECT_PROBABILITY, split_outliers
        from plenocal.io import read_camera, read_dataset, read_observations, read_poses

        camera = read_camera(cam_path)
        poses = read_poses(poses_path)
        board = read_dataset(dataset).manifest.target
        obs = read_observations(obs_path)
        res = compute_residuals(camera, poses, board, obs)
    except PlenocalError as exc:
        c.notes.append(f"residual maps and coverage omitted: {exc}")
        return None
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    p = None if options.get("loss") == "linear" else options.get("reject_probability", DEFAULT_REJECT_PROBABILITY)
    return ResidualData(camera, res, split_outliers(res, probability=p), obs, poses, board)


def _model_field_circle(c: Collected) -> tuple[float, float, float] | None:
    """(u, v, radius) px of the calibration's model field, when it limits it."""
    from plenocal.viz.verdict import field_circle

    doc = c.documents.get("calibration", (None, None))[1]
    return field_circle((doc or {}).get("model_field"))


def _residual_figures(c: Collected, data: ResidualData | None, figures: list[tuple[str, str]]) -> None:
    """Residual map (scaled to the typical residual, outliers marked) and histograms of the kept residuals."""
    if data is None:
        return
    from plenocal.viz.calibration import REFERENCE_PERCENTILE, residual_histograms_figure, residual_map_figure

    res, split, obs, camera = data.residuals, data.split, data.observations, data.camera
    pos = np.stack([obs.bap.u[res.bap_index], obs.bap.v[res.bap_index]], axis=1)
    field = _model_field_circle(c)
    fig = residual_map_figure(pos, res.uv, image_size_px=(camera.sensor.width_px, camera.sensor.height_px),
                              rho_residuals_px=res.rho if np.isfinite(res.rho).any() else None, rejected=~split.keep_bap,
                              field_circle_px=field)
    figures.append((_figure_uri(fig), f"Reprojection residuals of the calibration frames over the sensor. Arrow lengths are "
                    f"scaled so the {REFERENCE_PERCENTILE:.0f}th percentile residual (blue key) is 4 % of the image width; "
                    "longer arrows are clipped (red); features rejected by calibration's rule are red crosses."
                    + (" The dashed circle is the model's field: beyond it the residuals are no longer the centre's "
                       "(the lens's own aberrations), and depth is not given there." if field is not None else "")))
    kept = res.subset(split.keep_bap, split.keep_mic)
    terms_all = {"e_u": kept.uv[:, 0], "e_v": kept.uv[:, 1], "e_ρ": kept.rho, "e_mic": np.hypot(kept.mic_uv[:, 0], kept.mic_uv[:, 1])}
    types = {"e_u": kept.lens_type, "e_v": kept.lens_type, "e_ρ": kept.lens_type, "e_mic": kept.mic_type}
    # ρ of the features that have one (single views: NaN); a term with none is left out
    terms = {k: v[np.isfinite(v)] for k, v in terms_all.items() if np.isfinite(v).any()}
    types = {k: types[k][np.isfinite(terms_all[k])] for k in terms}
    figures.append((_figure_uri(residual_histograms_figure(terms, types)),
                    "Residual histograms per term and lens type (kept observations)"))


def _coverage_figure(c: Collected, data: ResidualData | None, figures: list[tuple[str, str]]) -> None:
    """Kept features over the sensor and over depth per lens type, with the focus planes and depths of field."""
    if data is None:
        return
    from plenocal.errors import PlenocalError
    from plenocal.evaluate.coverage import feature_depths
    from plenocal.viz.calibration import coverage_figure

    res, split, obs, camera = data.residuals, data.split, data.observations, data.camera
    idx = res.bap_index[split.keep_bap]
    feats = obs.bap.select(idx)
    try:
        depths = feature_depths(camera, data.poses, data.board, feats)
    except PlenocalError as exc:
        c.notes.append(f"coverage figure omitted: {exc}")
        return
    profile = c.documents.get("profile", (None, None))[1]
    if profile is None:
        c.notes.append("no profile.json: the coverage figure has no focus planes or depths of field")
    fig = coverage_figure(np.stack([feats.u, feats.v], axis=1), res.lens_type[split.keep_bap],
                          image_size_px=(camera.sensor.width_px, camera.sensor.height_px),
                          virtual_depth=depths.virtual_depth, object_distance_mm=depths.object_mm, profile=profile)
    figures.append((_figure_uri(fig), "Coverage: where the calibration is supported by observations (kept features per "
                    "lens type over the sensor, and over virtual depth and object distance against each type's focus "
                    "plane and depth of field). Outside the observed ranges the calibration extrapolates."))


def _pose_figure(c: Collected, figures: list[tuple[str, str]], board: Any = None) -> None:
    if "poses" not in c.documents:
        c.notes.append("no poses.json: 3-D view of the poses omitted")
        return
    from plenocal.viz.calibration import poses_3d_figure

    _, doc = c.documents["poses"]
    try:
        entries = doc["poses"]
        R = np.array([p["rotation"] for p in entries], dtype=np.float64)
        t = np.array([p["translation_mm"] for p in entries], dtype=np.float64)
        frames = [int(p["frame"]) for p in entries]
    except (KeyError, TypeError, ValueError):
        c.notes.append("poses.json malformed: 3-D view omitted")
        return
    if R.size == 0:
        return
    size = None if board is None else ((board.columns - 1) * board.square_mm, (board.rows - 1) * board.square_mm)
    figures.append((_figure_uri(poses_3d_figure(R, t, frames=frames, board_size_mm=size)),
                    "Board poses in the camera frame (the camera at the origin, z towards the scene)"))


MAX_REJECTED_LISTED = 40
"""Rejected features listed one by one in the page (all of them are in the evaluation's report.json)."""


def _rejected_table(rejected: dict[str, Any], what: str) -> str:
    feats = [f for f in rejected.get("features") or [] if isinstance(f, dict)]
    c = rejected.get("counts") or {}
    rm = rejected.get("rmse_all_observations") or {}
    head = (f"<h3>{html.escape(what)}: rejected observations</h3><p>{c.get('bap', 0)} features ({c.get('uv', 0)} on (u, v), "
            f"{c.get('rho', 0)} on ρ) and {c.get('mic', 0)} micro-image centres; rule: {html.escape(str(rejected.get('rule', '?')))}"
            f" (p = {_fmt(rejected.get('reject_probability'), 3)}). They are not in the RMSEs above; with them, (u, v) RMSE "
            f"would be {_fmt(rm.get('uv_px'), 4)} px.</p>")
    if rejected.get("suspended"):
        head += f'<p class="note">{html.escape(str(rejected["suspended"]))}</p>'
    if not feats:
        return head
    rows = [[str(f.get("frame")), str(f.get("node")), f"{f.get('k')}, {f.get('l')}", f"{_fmt(f.get('u'), 6)}, {_fmt(f.get('v'), 6)}",
             f"{_fmt(f.get('e_u'), 3)}, {_fmt(f.get('e_v'), 3)}", _fmt(f.get("e_rho"), 3), _fmt(f.get("s_uv"), 3),
             _fmt(f.get("s_rho"), 3), html.escape(str(f.get("reason")))] for f in feats[:MAX_REJECTED_LISTED]]
    more = f"<p class=\"src\">… and {len(feats) - MAX_REJECTED_LISTED} more in report.json</p>" if len(feats) > MAX_REJECTED_LISTED else ""
    return head + _table(["frame", "node", "k, l", "u, v [px]", "e_u, e_v [px]", "e_ρ [px]", "‖e_uv‖/σ̂", "|e_ρ|/σ̂", "reason"],
                         rows, cls="rejected") + more


def _evaluation_parts(c: Collected, figures: list[tuple[str, str]]) -> str:
    if "evaluation" not in c.documents:
        c.notes.append("no evaluation report: per-frame RMSE and ε_z omitted")
        return ""
    from plenocal.viz.calibration import per_frame_rmse_figure, translation_error_figure
    from plenocal.viz.verdict import is_finite_number

    path, doc = c.documents["evaluation"]
    body = ""
    sections = [("calibration frames, calibrated poses", doc)]
    if isinstance(doc.get("holdout"), dict):
        sections.append(("held-out frames, poses re-estimated", doc["holdout"]))
    if isinstance(doc.get("translation"), dict):
        sections.append(("translation frames, poses re-estimated", doc["translation"]))
    rows = []
    for what, sec in sections:
        rm = sec.get("rmse") if isinstance(sec.get("rmse"), dict) else None
        if rm is None:
            continue
        n_rej = ((sec.get("rejected") or {}).get("counts") or {}).get("bap")
        rows.append([html.escape(what), _fmt(rm.get("uv_px"), 4), _fmt(rm.get("rho_px"), 4), _fmt(rm.get("mic_px"), 4),
                     _fmt(sec.get("n_bap")), _fmt(n_rej)])
    if rows:
        body += _table(["RMSE of the kept observations", "u, v [px]", "ρ [px]", "MIC [px]", "features kept", "rejected"], rows)
    for what, sec in sections:
        if isinstance(sec.get("rejected"), dict) and ((sec["rejected"].get("counts") or {}).get("bap") or sec["rejected"].get("suspended")):
            body += _rejected_table(sec["rejected"], what)
    per_frame = doc.get("per_frame") if isinstance(doc.get("per_frame"), dict) else {}
    held = (doc.get("holdout") or {}).get("per_frame") if isinstance(doc.get("holdout"), dict) else None
    if per_frame or held:
        figures.append((_figure_uri(per_frame_rmse_figure(per_frame, held_out=held, keys=("uv_px", "rho_px"))),
                        "RMSE per frame of the kept features: calibration frames with their calibrated poses, then held-out "
                        "frames with re-estimated poses; red ✕ counts the features rejected in each frame (not in the bars)."))
    by_disp = _find_key(doc, "by_displacement")
    if isinstance(by_disp, list) and by_disp:
        try:
            d = [float(g["displacement_mm"]) for g in by_disp]
            e = [float(g["mean_percent"]) for g in by_disp]
            overall = (_find_key(doc, "epsilon_z_percent") or {}).get("mean")
            figures.append((_figure_uri(translation_error_figure(d, e, mean_percent=overall if is_finite_number(overall) else None)),
                            "Relative translation error ε_z versus displacement (mean over the pairs of each displacement)"))
        except (KeyError, TypeError, ValueError):
            c.notes.append("ε_z section malformed: figure omitted")
    body += f'<p class="src">from {html.escape(str(path))}</p>'
    return _section("Evaluation", body, "evaluation")


def _correction_sigma(sc: dict[str, Any]) -> str:
    """', its σ a–b % of 1/υ over the calibration frames' from a scaling's per-frame records."""
    per = sc.get("per_frame")
    sig: list[float] = []
    for v in (per.values() if isinstance(per, dict) else ()):
        x = v.get("correction_sigma_percent") if isinstance(v, dict) else None
        if isinstance(x, int | float):
            sig.append(float(x))
    return f", its σ {min(sig):.2f}–{max(sig):.2f} % of 1/υ over the calibration frames" if sig else ""


NEAR_CONJUGATE_FRACTION = 0.5
"""A depth frame whose textured micro-images are more than this fraction at |υ| = 2 (status
``at_limit``, :data:`plenocal.depth.matching.STATUS_AT_LIMIT`) is named in the report as near the
plane conjugate to the MLA: the demo's translation frames at 375 and 385 mm (υ ≈ 1.9, 1.2) have
442 of 450 and 368 of 372, and keep 8 and 4 depths, the latter 3 % near; the PRISM R12-B translation frames
≤ 1.0 % (at 450–650 mm), the real-optics R12-B's ≤ 8.4 %."""


def _depth_section(c: Collected) -> str:
    """The depth stage: per frame the micro-images with a depth, the median z and, from the
    evaluation, the on-board points' distance to the board plane; the displacement errors by step;
    the first :data:`DEPTH_MAPS_SHOWN` depth maps, each with its all-in-focus image."""
    if "depth" not in c.documents:
        return ""
    path, doc = c.documents["depth"]
    frames = doc.get("frames") if isinstance(doc.get("frames"), dict) else {}
    ev = (c.documents.get("evaluation", (None, {}))[1] or {}).get("depth") or {}
    ev_frames = ev.get("frames") if isinstance(ev.get("frames"), dict) else {}
    rows, near_conjugate = [], []
    for f, d in frames.items():
        if not isinstance(d, dict):
            continue
        e = ev_frames.get(f) or {}
        counts = d.get("counts") or {}
        z = (d.get("z_percentiles_mm") or {}).get("50")
        limit, textured = counts.get("at_limit"), d.get("textured")
        if isinstance(limit, int) and isinstance(textured, int) and textured and limit > NEAR_CONJUGATE_FRACTION * textured:
            near_conjugate.append(f"{html.escape(str(f))} ({limit} of {textured})")
        rows.append([html.escape(str(f)), f"{counts.get('estimated', '—')} / {textured if textured is not None else '—'}",
                     _fmt(limit), _fmt(counts.get("at_edge")), _fmt(z, 5), _fmt(e.get("median_abs_percent"), 3), _fmt(e.get("median_signed_percent"), 3),
                     _fmt(e.get("within_1_percent"), 3), _fmt(d.get("wall_time_s"), 3)])
    parts = [_table(["frame", "micro-images with a depth / textured", "at |υ| = 2", "at a depth edge", "median z (mm)",
                     "median |distance to board plane| (% of z)", "signed (%)", "fraction within 1 %", "s"], rows)]
    if near_conjugate:
        parts.append(f"<p><b>Near the plane conjugate to the micro-lens array</b>, frames {', '.join(near_conjugate)}: most "
                     "textured micro-images have their best match at |υ| = 2, the nearest that plane the matching reaches "
                     "(|υ| &lt; 2 cannot be estimated); the scene there is nearer that plane, it gets no depth, and the few "
                     "depths such a frame has are at the edge of the estimable range.</p>")
    from plenocal.depth.scaling import extrapolation_text

    for line in extrapolation_text({f: d.get("scaling") for f, d in (frames or {}).items() if isinstance(d, dict)}):
        parts.append(f"<p><b>Depth scaling extrapolated:</b> {html.escape(line)}.</p>")
    search = doc.get("search") if isinstance(doc.get("search"), dict) else {}
    gap, rng = search.get("distances_not_searched_mm"), search.get("distance_range_mm")
    if isinstance(gap, list) and len(gap) == 2 and isinstance(rng, list) and len(rng) == 2:
        from plenocal.depth.matching import not_searched_text

        parts.append(f"<p><b>Not searched:</b> {html.escape(not_searched_text(rng, gap, default=bool(search.get('default'))))}.</p>")
    sc = doc.get("scaling")
    if isinstance(sc, dict):
        parts.append(f"<p>Depth scaling (the matcher's bias in 1/υ, fitted on the calibration frames against their "
                     f"calibrated poses): <b>{'applied' if sc.get('kept') else 'not applied'}</b>, 1/υ ← "
                     f"{_fmt(sc.get('c0'), 3)} ± {_fmt(sc.get('c0_std'), 2)} + {_fmt(sc.get('c1'), 5)} ± "
                     f"{_fmt(sc.get('c1_std'), 2)} · 1/υ{_correction_sigma(sc)}; {html.escape(str(sc.get('reason', '')))}.</p>")
        fld = sc.get("field")
        if isinstance(fld, dict):
            parts.append(f"<p>Field term of the depth scaling (the matcher's error across the field, each calibration frame's own "
                         f"shape averaged): <b>{'applied' if fld.get('kept') else 'not applied'}</b>, 1/υ ÷ (1 + {_fmt(fld.get('offset'), 3)} "
                         f"+ {_fmt(fld.get('b'), 3)} ± {_fmt(fld.get('b_std'), 2)} · r² + {_fmt(fld.get('c'), 3)} ± "
                         f"{_fmt(fld.get('c_std'), 2)} · r⁴), r the micro-lens's distance from the axis in mm; "
                         f"T² = {_fmt(fld.get('t2'), 3)} against {_fmt(fld.get('threshold'), 3)}.</p>")
    else:
        parts.append("<p>No depth scaling: the matcher's virtual depths are used as estimated.</p>")
    disp = ev.get("displacements") or {}
    if disp.get("by_displacement"):
        drows = [[_fmt(g.get("displacement_mm"), 4), _fmt(g.get("mean_abs_percent"), 3), _fmt(g.get("std_percent"), 3),
                  str(g.get("n_pairs"))] for g in disp["by_displacement"]]
        parts.append("<h3>Board depth against the known displacements (translation frames)</h3>"
                     + _table(["displacement (mm)", "mean |error| (%)", "std (%)", "pairs"], drows))
    figs = []
    for f in list(frames)[:DEPTH_MAPS_SHOWN]:
        png = path.parent / "depth" / f"frame-{f}-depth.png"
        if png.is_file():
            figs.append(_figure_html(_png_data_uri(png.read_bytes()), f"frame {f}: depth per micro-image (turbo colours, "
                                                                        "2nd–98th percentile of z)"))
        png = path.parent / "depth" / f"frame-{f}-depth-pixels.png"
        if png.is_file():
            figs.append(_figure_html(_png_data_uri(png.read_bytes()), f"frame {f}: depth per pixel (--per-pixel: the "
                                                                        "screened pixels' z in the central view, median per cell)"))
        png = path.parent / "depth" / f"frame-{f}-allfocus.png"
        if png.is_file():
            figs.append(_figure_html(_png_data_uri(png.read_bytes()), f"frame {f}: all-in-focus image (each micro-image's "
                                                                        "patch drawn at its depth; black: nothing drawn)"))
    parts += figs
    if len(frames) > DEPTH_MAPS_SHOWN:
        parts.append(f"<p class=\"src\">The other depth maps, all-in-focus images and the point clouds (PLY) are in "
                     f"{html.escape(str(path.parent / 'depth'))}.</p>")
    parts.append(f'<p class="src">from {html.escape(str(path))}</p>')
    return _section("Depth", "".join(parts), "depth")


def _kappa_section(c: Collected) -> str:
    if "kappa" not in c.documents:
        c.notes.append("no kappa.json: relative blur omitted")
        return ""
    path, doc = c.documents["kappa"]
    s = doc.get("spread", {}) if isinstance(doc.get("spread"), dict) else {}
    rows = [["κ", _fmt(doc.get("kappa"), 5)], ["pairs", _fmt(doc.get("n_pairs"))], ["frames", _fmt(len(doc.get("per_frame", {}) or {}))],
            ["κ per frame (mean ± std)", f"{_fmt(s.get('mean'), 4)} ± {_fmt(s.get('std'), 3)}"],
            ["κ per frame (min..max)", f"{_fmt(s.get('min'), 4)} .. {_fmt(s.get('max'), 4)}"],
            ["Θ(κ) / Θ(0)", _fmt((doc.get("cost") or 0) / doc["cost_no_blur"], 4) if doc.get("cost_no_blur") else "—"]]
    return _section("Relative blur κ (σ = κ·ρ)", _table(["quantity", "value"], rows) + f'<p class="src">from {html.escape(str(path))}</p>', "kappa")


def _profile_section(c: Collected) -> str:
    if "profile" not in c.documents:
        c.notes.append("no profile.json: depth of field omitted")
        return ""
    path, doc = c.documents["profile"]
    rows = []
    for t in doc.get("types", []):
        lim = t.get("limits", {})
        rows.append([str(int(t.get("type", 0)) + 1), _fmt(t.get("focus_plane", {}).get("object_mm"), 6),
                     " .. ".join(_fmt(x, 6) for x in sorted(lim.get("object_mm", []), key=lambda x: math.inf if x is None else x)),
                     " .. ".join(_fmt(x, 4) for x in sorted(lim.get("virtual_depth", []))), _fmt(t.get("dof", {}).get("object_mm"), 5)])
    tot = doc.get("total", {})
    body = _table(["type", "focus plane [mm]", "DoF limits [mm]", "virtual depth", "DoF [mm]"], rows)
    body += (f"<p>Total depth of field <b>{_fmt(tot.get('dof_object_mm'), 5)} mm</b>, virtual depth "
             f"{' .. '.join(_fmt(x, 4) for x in tot.get('virtual_depth', []))}; r0 = {_fmt((doc.get('r0_mm') or 0) * 1e3, 4)} µm.</p>")
    return _section("Depth of field", body + f'<p class="src">from {html.escape(str(path))}</p>', "profile")


def _provenance_section(c: Collected) -> str:
    rows = [["plenocal (report)", html.escape(__version__), "", ""]]
    for kind, (path, doc) in sorted(c.documents.items()):
        version = doc.get("plenocal_version") or _find_key(doc.get("provenance", {}), "plenocal_version") or "—"
        inputs = doc.get("inputs") or doc.get("provenance") or {}
        hashes = []
        if isinstance(inputs, dict):
            for name, v in inputs.items():
                if isinstance(v, dict) and "sha256" in v:
                    hashes.append(f"{html.escape(name)}: <code>{html.escape(str(v['sha256'])[:16])}…</code>")
                elif isinstance(v, dict) and all(isinstance(x, dict) and "sha256" in x for x in v.values()) and v:
                    hashes.append(f"{html.escape(name)}: {len(v)} files hashed")
                elif isinstance(v, str):
                    hashes.append(f"{html.escape(name)}: {html.escape(v)}")
        rows.append([html.escape(kind), html.escape(str(version)), html.escape(path.name), "<br>".join(hashes)])
    settings = []
    for kind, (_, doc) in sorted(c.documents.items()):
        for key in ("settings", "options"):
            if isinstance(doc.get(key), dict):
                settings.append(f"<h3>{html.escape(kind)} {key}</h3><pre>{html.escape(json.dumps(doc[key], indent=1))}</pre>")
    return _section("Settings and provenance", _table(["stage", "version", "file", "inputs"], rows) + "".join(settings), "provenance")


def verdict_html(v: Any) -> str:
    """The verdict section (:class:`plenocal.viz.verdict.Verdict`) as HTML: status line and reasons,
    camera, intrinsics, RMSEs of the kept observations, rejections, and every stage's findings."""
    icon = {"error": "✖", "warning": "⚠", "info": "·"}
    if v.reasons:
        why = "<ul class=\"reasons\">" + "".join(
            f"<li><b>{html.escape(f.stage)}</b>: {html.escape(f.text)}</li>" for f in v.reasons) + "</ul>"
    else:
        why = "<p class=\"reasons\">No stage reported a warning; the notes below are for information.</p>"
    head = f'<p class="headline">{" · ".join(html.escape(h) for h in v.headline)}</p>' if v.headline else ""
    parts = [f'<div class="status {v.css}"><span class="badge">{html.escape(v.status)}</span>{head}{why}</div>']
    left = ""
    if v.camera:
        left = "<h3>Camera</h3>" + _table(["", ""], [[html.escape(a), html.escape(b)] for a, b in v.camera], cls="kv")
    right = ""
    if v.intrinsics:
        right = ("<h3>Intrinsics ± σ</h3>" + _table(["parameter", "value ± σ", "σ from"], [[html.escape(x) for x in r] for r in v.intrinsics],
                                                   cls="intrinsics")
                 + '<p class="src">σ to 2 significant digits, the value to the same decimal place; every parameter is under '
                   '<a href="#calibration">Calibration</a>.</p>')
    parts.append(f'<div class="cols"><div>{left}</div><div>{right}</div></div>')
    if v.rmse:
        parts.append("<h3>RMSE of the observations kept</h3>"
                     + _table(["observations", "u, v", "ρ", "MIC", "counted"], [[html.escape(x) for x in r] for r in v.rmse]))
    if v.rejections:
        parts.append("<h3>Rejected, per stage and reason</h3>"
                     + _table(["stage", "rejected", "count", "why"], [[html.escape(x) for x in r] for r in v.rejections], cls="rej"))
    items = "".join(f'<li class="{f.level}"><span class="lvl">{icon.get(f.level, "·")}</span> <b>{html.escape(f.stage)}</b>: '
                    f"{html.escape(f.text)}</li>" for f in v.findings)
    if items:
        parts.append(f"<h3>Warnings and notes from every stage</h3><ul class=\"findings\">{items}</ul>")
    return f'<section id="verdict" class="verdict" data-status="{html.escape(v.status)}"><h2>Verdict</h2>{"".join(parts)}</section>'


CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
.status{border-radius:6px;padding:.7em 1em;margin:.6em 0 1em;border:2px solid}
.status .badge{font-size:1.35em;font-weight:bold;text-transform:uppercase;letter-spacing:.03em}
.status.ok{background:#e8f6ec;border-color:#1a7f37}.status.ok .badge{color:#1a7f37}
.status.warn{background:#fff4e0;border-color:#b26b00}.status.warn .badge{color:#8a5200}
.status.bad{background:#fde7e9;border-color:#b00020}.status.bad .badge{color:#b00020}
.reasons{margin:.4em 0 0}.headline{margin:.3em 0;font-size:1.05em}.cols{display:flex;gap:2em;flex-wrap:wrap}.cols>div{flex:1 1 420px}
table.kv thead{display:none}ul.findings{list-style:none;padding-left:0;font-size:.9em}ul.findings li{margin:.2em 0}
li.warning{color:#8a5200}li.error{color:#b00020;font-weight:bold}li.info{color:#333}.lvl{display:inline-block;width:1.2em}
nav{font-size:.9em;margin:.5em 0}nav a{margin-right:1em}table.intrinsics td:nth-child(2){white-space:nowrap;font-variant-numeric:tabular-nums}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
.flag{color:#b00;font-weight:bold;font-size:.8em}.note{color:#8a5a00}.src{font-size:.8em;color:#777}pre{font-size:.8em;background:#f8f8f8;padding:.5em}
"""

SCRIPT = """
window.addEventListener('load',function(){var imgs=document.images,bad=0;
for(var i=0;i<imgs.length;i++){if(!imgs[i].complete||imgs[i].naturalWidth===0){bad++;}}
document.body.setAttribute('data-broken-images',String(bad));document.body.setAttribute('data-images',String(imgs.length));
var v=document.getElementById('verdict'),r=v?v.getBoundingClientRect():null,st=v?getComputedStyle(v):null;
document.body.setAttribute('data-verdict',v&&r.height>0&&st.display!=='none'&&st.visibility!=='hidden'?'visible':'missing');
document.body.setAttribute('data-verdict-top',r?String(Math.round(r.top+window.scrollY)):'-1');});
"""


def _verdict(c: Collected) -> Any:
    """The verdict (:class:`plenocal.viz.verdict.Verdict`) of the collected stage outputs."""
    from plenocal.viz.verdict import assemble

    return assemble({k: d for k, (_, d) in c.documents.items()}, notes=c.notes)


def folder_verdict(folder: str | Path) -> Any:
    """The verdict of the stage outputs in ``folder``, as the report's page leads with it, without
    building the page."""
    return _verdict(collect(Path(folder)))


def build_report(folder: str | Path) -> tuple[str, Collected]:
    """The HTML page (str) for the stage outputs in ``folder``, and what was found.

    The page leads with the verdict (status, reasons, camera, intrinsics ± σ, RMSEs of the kept
    observations, rejections, every stage's warnings), then the figures (residual map scaled to the
    typical residual, coverage of the sensor and depth range, per-frame RMSE, histograms, poses in
    3-D, ε_z, the stages' PNGs), then the details: every parameter with both σ and correlations
    above 0.9 flagged, the evaluation with its rejected observations, κ, the depth of field, the
    settings and the provenance (software versions, input hashes).
    """
    c = collect(Path(folder))
    figures: list[tuple[str, str]] = []
    data = _residual_data(c)
    _residual_figures(c, data, figures)
    _coverage_figure(c, data, figures)
    details = [_calibration_section(c), _evaluation_parts(c, figures)]
    _pose_figure(c, figures, board=data.board if data is not None else None)
    details += [_depth_section(c), _kappa_section(c), _profile_section(c)]
    for stem, caption in STAGE_IMAGES:
        if stem in c.images:
            figures.append((_png_data_uri(c.images[stem].read_bytes()), caption))
    figs = "".join(_figure_html(uri, cap) for uri, cap in figures) or "<p>No figures.</p>"
    details.append(_provenance_section(c))
    verdict = _verdict(c)
    nav = ('<nav><a href="#verdict">verdict</a><a href="#figures">figures</a><a href="#calibration">calibration</a>'
           '<a href="#evaluation">evaluation</a><a href="#depth">depth</a><a href="#kappa">κ</a><a href="#profile">depth of field</a>'
           '<a href="#provenance">provenance</a></nav>')
    page = (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>plenocal report: {html.escape(c.folder.name)}</title><style>{CSS}</style>"
        f"<script>{SCRIPT}</script></head><body>"
        f"<h1>plenocal calibration report</h1><p class=\"src\">Folder <code>{html.escape(str(c.folder))}</code>; "
        f"plenocal {html.escape(__version__)}; {len(figures)} figures.</p>" + nav
        + verdict_html(verdict)
        + _section("Figures", figs, "figures")
        + "".join(s for s in details if s)
        + "</body></html>"
    )
    return page, c
