"""The bundled main-lens designs and lens loading by name or file.

Designs (JSON in ``designs/``, ``docs/simulator.md``): ``double-gauss``, ``tessar``,
``telephoto``, ``field-corrector`` (real glass, from optiland 0.6.3's samples, Schott n_d
indices), and the ideal systems ``thin`` (the paper's), ``thick-ideal``, ``ideal-stop-front``,
``ideal-stop-behind``. Each is stored at its published scale; :func:`load_lens` scales it to the
requested EFL.
"""

from __future__ import annotations

from pathlib import Path

from plenocal.sim.optics.prescription import Prescription

DESIGNS_DIR = Path(__file__).resolve().parent / "designs"
DESIGN_NAMES = (
    "double-gauss", "tessar", "telephoto", "field-corrector",
    "thin", "thick-ideal", "ideal-stop-front", "ideal-stop-behind",
)
REAL_DESIGNS = ("double-gauss", "tessar", "telephoto", "field-corrector")
"""The designs traced through real glass (the others are ideal surfaces)."""


def design_path(name: str) -> Path:
    """The JSON file of a bundled design."""
    return DESIGNS_DIR / f"{name}.json"


def load_lens(name_or_path: str | Path, *, efl_mm: float | None = None) -> Prescription:
    """A bundled design by name, or a ``plenocal-lens`` file, optionally scaled to ``efl_mm``.

    Raises
    ------
    InputFileError
        A file that does not exist or is malformed (one line, naming the file and the key).
    """
    from plenocal.io.prescription import read_prescription

    key = str(name_or_path)
    path = design_path(key) if key in DESIGN_NAMES else Path(name_or_path)
    p = read_prescription(path)
    return p if efl_mm is None else p.scaled_to_efl(efl_mm)
