"""One self-contained HTML page from whatever stage outputs exist in an output folder.

Reads (each optional; a missing or unreadable part is omitted with a note): ``precalibration.json``
(+ ``radii.png``, ``centres.png``), the calibration's ``report.json`` (``parameters`` {name:
{value, std}}, ``correlation`` {names, matrix}, ``rmse``...), ``camera.json``, ``poses.json``, the
evaluation's ``report.json`` (``per_frame``, ε_z ``by_displacement``), ``kappa.json`` (+ figures)
and ``profile.json`` (+ figure), in OUT and its direct sub-folders. Figures are embedded as
base64 PNG; the page references no external URL.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
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
    "plenocal-evaluation": "evaluation",
    "plenocal-calibration": "calibration",
    "plenocal-kappa": "kappa",
    "plenocal-profile": "profile",
    "plenocal-poses": "poses",
    "plenocal-camera": "camera",
}


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


def collect(folder: Path) -> Collected:
    """Find every known stage output in ``folder`` and its direct sub-folders (nearest first)."""
    c = Collected(Path(folder))
    dirs = [c.folder, *sorted(p for p in c.folder.iterdir() if p.is_dir())]
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


def _calibration_section(c: Collected, figures: list[str]) -> str:
    if "calibration" not in c.documents:
        c.notes.append("no calibration report (report.json with parameters): calibration summary omitted")
        return ""
    path, doc = c.documents["calibration"]
    parts = []
    rmse = doc.get("rmse") if isinstance(doc.get("rmse"), dict) else {}
    summary = [[html.escape(k), _fmt(v, 4)] for k, v in rmse.items()]
    for key in ("n_bap", "n_mic", "n_frames", "converged", "iterations", "sum_squared_residuals", "wall_time_s"):
        if key in doc:
            summary.append([key, _fmt(doc[key], 6)])
    parts.append(_table(["quantity", "value"], summary))
    params = doc.get("parameters") if isinstance(doc.get("parameters"), dict) else {}
    strong = strong_correlations(doc.get("correlation"))
    flagged = {n for a, b, _ in strong for n in (a, b)}
    rows = []
    for name, p in params.items():
        if not isinstance(p, dict):
            continue
        v, s = p.get("value"), p.get("std")
        rel = f"{abs(s / v) * 100:.2g} %" if isinstance(v, int | float) and isinstance(s, int | float) and v else "—"
        flag = ' <span class="flag">|r| &gt; 0.9</span>' if name in flagged else ""
        frozen = " (frozen)" if p.get("frozen") else ""
        rows.append([html.escape(name) + frozen + flag, _fmt(v, 10), _fmt(s, 3), rel])
    if rows:
        parts.append("<h3>Parameters ± σ</h3>" + _table(["parameter", "value", "σ", "σ/|value|"], rows, cls="params"))
    if strong:
        crow = [[html.escape(a), html.escape(b), f"{r:+.4f}"] for a, b, r in strong]
        parts.append(f"<h3>Correlations above {CORRELATION_FLAG}</h3>" + _table(["parameter", "parameter", "r"], crow, cls="corr"))
    elif params:
        parts.append(f"<p>No parameter pair is correlated above {CORRELATION_FLAG}.</p>")
    parts.append(f'<p class="src">from {html.escape(str(path))}</p>')
    return _section("Calibration summary", "".join(parts), "calibration")


def _residual_figures(c: Collected, figures: list[tuple[str, str]]) -> None:
    """Residual maps and histograms from camera + poses + observations + the dataset's target."""
    from plenocal.errors import PlenocalError

    if "calibration" not in c.documents:
        return
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
        c.notes.append("residual maps omitted: they need camera.json, poses.json, observations and the dataset (inputs.dataset)")
        return
    try:
        from plenocal.evaluate.metrics import compute_residuals
        from plenocal.io import read_camera, read_dataset, read_observations, read_poses
        from plenocal.viz.calibration import residual_histograms_figure, residual_map_figure

        camera = read_camera(cam_path)
        res = compute_residuals(camera, read_poses(poses_path), read_dataset(dataset).manifest.target, read_observations(obs_path))
        obs = read_observations(obs_path)
    except PlenocalError as exc:
        c.notes.append(f"residual maps omitted: {exc}")
        return
    pos = np.stack([obs.bap.u[res.bap_index], obs.bap.v[res.bap_index]], axis=1)
    fig = residual_map_figure(pos, res.uv, image_size_px=(camera.sensor.width_px, camera.sensor.height_px),
                              rho_residuals_px=res.rho if np.all(np.isfinite(res.rho)) else None)
    figures.append((_figure_uri(fig), "Reprojection residuals over the sensor"))
    terms = {"e_u": res.uv[:, 0], "e_v": res.uv[:, 1], "e_ρ": res.rho, "e_mic": np.hypot(res.mic_uv[:, 0], res.mic_uv[:, 1])}
    types = {"e_u": res.lens_type, "e_v": res.lens_type, "e_ρ": res.lens_type, "e_mic": res.mic_type}
    terms = {k: v for k, v in terms.items() if np.all(np.isfinite(v))}
    figures.append((_figure_uri(residual_histograms_figure(terms, types)), "Residual histograms per term and lens type"))


def _pose_figure(c: Collected, figures: list[tuple[str, str]]) -> None:
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
    figures.append((_figure_uri(poses_3d_figure(R, t, frames=frames)), "Board poses in the camera frame"))


def _evaluation_parts(c: Collected, figures: list[tuple[str, str]]) -> str:
    if "evaluation" not in c.documents:
        c.notes.append("no evaluation report: per-frame RMSE and ε_z omitted")
        return ""
    from plenocal.viz.calibration import per_frame_rmse_figure, translation_error_figure

    path, doc = c.documents["evaluation"]
    rmse = doc.get("rmse") if isinstance(doc.get("rmse"), dict) else {}
    body = _table(["RMSE", "px"], [[html.escape(k), _fmt(v, 4)] for k, v in rmse.items()])
    per_frame = doc.get("per_frame")
    if isinstance(per_frame, dict) and per_frame:
        figures.append((_figure_uri(per_frame_rmse_figure(per_frame)), "Reprojection RMSE per frame"))
    by_disp = _find_key(doc, "by_displacement")
    if isinstance(by_disp, list) and by_disp:
        try:
            d = [float(g["displacement_mm"]) for g in by_disp]
            e = [float(g["mean_percent"]) for g in by_disp]
            figures.append((_figure_uri(translation_error_figure(d, e)), "ε_z versus displacement"))
        except (KeyError, TypeError, ValueError):
            c.notes.append("ε_z section malformed: figure omitted")
    body += f'<p class="src">from {html.escape(str(path))}</p>'
    return _section("Evaluation", body, "evaluation")


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


CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
.flag{color:#b00;font-weight:bold;font-size:.8em}.note{color:#8a5a00}.src{font-size:.8em;color:#777}pre{font-size:.8em;background:#f8f8f8;padding:.5em}
"""

SCRIPT = """
window.addEventListener('load',function(){var imgs=document.images,bad=0;
for(var i=0;i<imgs.length;i++){if(!imgs[i].complete||imgs[i].naturalWidth===0){bad++;}}
document.body.setAttribute('data-broken-images',String(bad));document.body.setAttribute('data-images',String(imgs.length));});
"""


def build_report(folder: str | Path) -> tuple[str, Collected]:
    """The HTML page (str) for the stage outputs in ``folder``, and what was found.

    The page holds: the calibration summary (metrics, parameters ± σ, correlations above 0.9
    flagged), the evaluation, κ, the depth of field, every figure (the stages' PNGs and figures
    drawn here from their JSON: residual maps and histograms, per-frame RMSE, poses in 3-D, ε_z),
    the settings and the provenance (software versions, input hashes), and notes on what is missing.
    """
    c = collect(Path(folder))
    figures: list[tuple[str, str]] = []
    sections = [_calibration_section(c, [])]
    _residual_figures(c, figures)
    _pose_figure(c, figures)
    sections.append(_evaluation_parts(c, figures))
    sections.append(_kappa_section(c))
    sections.append(_profile_section(c))
    for stem, caption in STAGE_IMAGES:
        if stem in c.images:
            figures.append((_png_data_uri(c.images[stem].read_bytes()), caption))
    figs = "".join(_figure_html(uri, cap) for uri, cap in figures) or "<p>No figures.</p>"
    sections.append(_section("Figures", figs, "figures"))
    sections.append(_provenance_section(c))
    notes = "".join(f'<li class="note">{html.escape(n)}</li>' for n in c.notes)
    page = (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>plenocal report: {html.escape(c.folder.name)}</title><style>{CSS}</style>"
        f"<script>{SCRIPT}</script></head><body>"
        f"<h1>plenocal calibration report</h1><p>Folder <code>{html.escape(str(c.folder))}</code>; "
        f"plenocal {html.escape(__version__)}; {len(figures)} figures.</p>"
        + (f"<ul>{notes}</ul>" if notes else "")
        + "".join(s for s in sections if s)
        + "</body></html>"
    )
    return page, c
