"""The command line's parser is built for the command being run only, and the listing of every
command (``plenocal --help``) without importing any (cli/main.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from plenocal.cli.main import SUBCOMMANDS, _help_line, build_parser


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_lines_read_from_source_are_the_modules(name):
    assert _help_line(name) == importlib.import_module(f"plenocal.cli.{name}").HELP


def test_the_listing_is_the_full_parsers():
    assert build_parser(listing=True).format_help() == build_parser().format_help()


@pytest.mark.parametrize(("argv", "absent"), [
    (["--help"], ("plenocal.cli.calibrate", "plenocal.cli.detect", "scipy")),
    (["calibrate", "--help"], ("plenocal.cli.detect", "plenocal.cli.depth", "sklearn", "scipy.stats")),
])
def test_a_command_imports_only_what_it_runs(argv, absent):
    """`plenocal --help` imported the whole library (4 s); `plenocal calibrate` imported
    scikit-learn, the depth kernels and every other command's modules (2 s of its start)."""
    code = ("import sys\nfrom plenocal.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {list(absent)!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
