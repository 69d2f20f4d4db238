"""CI runs what a newcomer runs: `.ci/run` holds the README's test command verbatim, and that
command builds a fresh virtual environment before it installs and tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command() -> str:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    (command,) = [b.strip() for b in blocks if "pytest" in b]
    return command


def test_ci_runs_the_readme_test_command():
    command = _readme_test_command()
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in lines
    assert lines[-1] == command or lines[-1] == ""


def test_the_test_command_starts_from_a_fresh_environment():
    command = _readme_test_command()
    steps = [s.strip() for s in command.split("&&")]
    assert steps[0].startswith("python -m venv --clear .venv")
    assert all(s.startswith(".venv/bin/python -m ") for s in steps[1:])
    assert any("--upgrade-strategy eager" in s and "'.[test]'" in s for s in steps)
    assert steps[-1].startswith(".venv/bin/python -m pytest") and '-m "not slow"' in steps[-1]


def test_the_suite_runs_on_two_workers():
    """Two worker processes share the suite (pytest-xdist, a test extra): one process on CI's two
    cores came within 33 s of its 15 minutes."""
    steps = [s.strip() for s in _readme_test_command().split("&&")]
    assert " -n 2 " in f"{steps[-1]} " and "--dist worksteal" in steps[-1]
    assert '"pytest-xdist' in (ROOT / "pyproject.toml").read_text()
