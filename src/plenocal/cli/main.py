"""``plenocal`` entry point.

Each subcommand lives in its own module ``plenocal.cli.<name>`` exposing ``register(subparsers)``
which adds its parser and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and
returning an exit code).

Every way a command can fail because of its input ends in exactly one line on stderr and no
traceback (DESIGN §8):

- :class:`plenocal.errors.PlenocalError` (including a bad command line: :class:`OneLineParser`
  turns argparse's usage block into one line) and environment errors (:class:`OSError`: disk
  full, permission denied) exit with code 2;
- Ctrl-C exits with 130 and SIGTERM with 143, wherever they arrive (also inside ``plenocal run``
  or ``plenocal demo``, whose stages run through :func:`dispatch`, which lets them through);
- Python warnings and third-party chatter are not shown (readers quote what matters in their
  own message, see :mod:`plenocal.io._quiet`);
- a corrupted numba kernel cache is cleared and the command run again
  (:mod:`plenocal.cli._numba_cache`).

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import logging
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from plenocal import __version__
from plenocal.errors import PlenocalError, UsageError

# Subcommand modules, in the order shown by --help. Each exists only once it works.
SUBCOMMANDS: tuple[str, ...] = ("demo", "run", "simulate", "precalibrate", "detect", "import_libpleno", "export_libpleno", "calibrate", "evaluate", "blur", "depth_scaling", "depth", "profile", "lens", "report")

EXIT_ERROR = 2
EXIT_NOT_TRUSTWORTHY = 3
"""``calibrate`` and ``run`` wrote everything, and the verdict says the camera is not trustworthy
(:func:`plenocal.viz.verdict.assemble`: e.g. a scale that rests on an exit pupil the images cannot
place, too many rejections within the model's field, a result written despite a failed check): a
script must not take it for a calibration, a user can still read every output."""
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def verdict_exit_code(folder: Path, *, command: str, written: str, quiet: bool = False) -> int:
    """0, or :data:`EXIT_NOT_TRUSTWORTHY` with one line on stderr (``plenocal COMMAND: not trustworthy
    — <first reason>; WRITTEN``, unless ``quiet``) when the report's verdict on the stage outputs in
    ``folder`` is "not trustworthy"."""
    from plenocal.viz.report import folder_verdict
    from plenocal.viz.verdict import not_trustworthy_line

    line = not_trustworthy_line(folder_verdict(folder))
    if line is None:
        return 0
    if not quiet:
        print(f"plenocal {command}: {line}; {written}", file=sys.stderr)
    return EXIT_NOT_TRUSTWORTHY


class CommandLineError(UsageError):
    """A command line argparse refused; ``prog`` is the (sub)command whose parser refused it."""

    def __init__(self, prog: str, message: str) -> None:
        self.prog = prog
        super().__init__(message)


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C so that temporaries are removed on the way out."""


class OneLineParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors are one line (raised, not printed).

    Sub-parsers made by ``add_subparsers`` are of the same class.
    """

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(self.prog, f"{message} (see '{self.prog} --help')")


def build_parser(command: str | None = None, *, listing: bool = False) -> argparse.ArgumentParser:
    """The command line's parser: every subcommand's; only ``command``'s (a name of
    :data:`SUBCOMMANDS`) when given; with ``listing``, none (each by its name and help line only).

    A subcommand's module imports what it runs, so building every parser imported the whole
    library (scipy, scikit-learn, numba kernels): 3.4–4 s before any command started, 2 s more
    than ``plenocal calibrate`` needs, and 4 s for ``plenocal --help``. :func:`dispatch` builds only
    the parser of the command its arguments name, the others registered by name (argparse's list of
    choices); when they name none (``plenocal --help``, ``--version``, a mistyped command), the
    listing, whose help lines :func:`_help_line` reads from the modules' sources."""
    parser = OneLineParser(
        prog="plenocal",
        description="Blur Aware Plenoptic calibration of plenoptic cameras from raw images.",
    )
    parser.add_argument("--version", action="version", version=f"plenocal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        if name == command or (command is None and not listing):
            importlib.import_module(f"plenocal.cli.{name}").register(sub)
        elif listing:
            sub.add_parser(name.replace("_", "-"), help=_help_line(name))
        else:
            sub.add_parser(name.replace("_", "-"))
    return parser


def _help_line(name: str) -> str | None:
    """Subcommand ``name``'s ``HELP`` string (the help line its ``register`` gives its parser), read
    from its module's source without importing the module; None when it is not a literal."""
    spec = importlib.util.find_spec(f"plenocal.cli.{name}")
    try:
        tree = ast.parse(Path(str(spec.origin)).read_text(encoding="utf-8")) if spec is not None else None
    except (OSError, SyntaxError, ValueError):  # no source beside the code (a frozen or compiled install)
        tree = None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HELP" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, str) else None
    return None


def _named_command(argv: Sequence[str]) -> str | None:
    """The :data:`SUBCOMMANDS` name of the command ``argv`` names (its first argument that is not
    an option), or None."""
    for a in argv:
        if not a.startswith("-"):
            name = a.replace("-", "_")
            return name if name in SUBCOMMANDS else None
    return None


def dispatch(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the subcommand; errors propagate (for :func:`main` or a caller
    such as ``plenocal run`` to report as one line)."""
    command = _named_command(argv)
    parser = build_parser(command, listing=command is None)
    args = parser.parse_args(list(argv))
    if getattr(args, "func", None) is None:
        raise CommandLineError("plenocal", "no command given (see 'plenocal --help')")
    return int(args.func(args) or 0)


def _command(argv: Sequence[str]) -> str:
    """'plenocal <command>' for messages (from the raw arguments: parsing may have failed)."""
    names = {m.replace("_", "-") for m in SUBCOMMANDS}
    for a in argv:
        if a in names:
            return f"plenocal {a}"
        if not a.startswith("-"):
            break
    return "plenocal"


def one_line(text: str) -> str:
    """``text`` with line breaks folded (a message must stay on one line)."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """No Python warning, and no log record of a library that has no handler of its own (e.g.
    matplotlib's "building the font cache"), reaches stderr while a command runs."""
    null = logging.NullHandler()
    root = logging.getLogger()
    root.addHandler(null)  # with a handler on the root, logging's last-resort stderr handler is unused
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeHandler(null)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the block runs (main thread only), SIGTERM raises :class:`Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


SIGNAL_REDELIVERY_S = 0.001
"""A signal whose exception Python dropped (:func:`_signals_not_swallowed`) is raised again this
long after, from a timer: by then the C callback it was dropped in has returned."""


@contextlib.contextmanager
def _signals_not_swallowed() -> Iterator[None]:
    """While the block runs (main thread, POSIX), a Ctrl-C or SIGTERM whose exception Python had
    to drop is raised again.

    A signal's handler runs in whatever Python code the main thread executes; inside a callback
    called from C (numba compiling a kernel calls llvmlite's object-cache callback through ctypes)
    its :class:`KeyboardInterrupt` or :class:`Terminated` cannot propagate: Python reports it as
    "Exception ignored on calling ctypes callback function" (:data:`sys.unraisablehook`) and goes
    on. A fresh clone's ``plenocal simulate`` interrupted 4 s in, while compiling, then ran to the
    end and exited 0 with a traceback on stderr. Here such a dropped exception is not printed and
    is raised again :data:`SIGNAL_REDELIVERY_S` later from a SIGALRM timer, outside the callback
    (dropped again, it is re-armed again). Other unraisable exceptions go to the previous hook."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    pending: list[type[BaseException]] = []

    def hook(unraisable: Any) -> None:
        exc_type = unraisable.exc_type
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt | Terminated):
            pending[:] = [exc_type]
            signal.setitimer(signal.ITIMER_REAL, SIGNAL_REDELIVERY_S)
            return
        previous_hook(unraisable)

    def alarm(signum: int, frame: Any) -> None:
        if pending:
            raise pending.pop()()

    previous_hook = sys.unraisablehook
    previous_alarm = signal.signal(signal.SIGALRM, alarm)
    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous_alarm)


def interruption(exc: BaseException) -> BaseException | None:
    """The Ctrl-C or SIGTERM behind ``exc``, if any.

    A signal whose Python handler runs while a numba kernel is being dispatched surfaces as
    ``SystemError: CPUDispatcher(...) returned a result with an exception set``, with the
    :class:`KeyboardInterrupt` or :class:`Terminated` as its cause or context: the kernel's result
    arrived with the handler's exception pending. One that runs while an extension module
    initialises surfaces as ``ImportError: initialization failed`` with it as the cause (scipy's
    HiGHS wrapper, 1 run in 36 of ``plenocal simulate`` interrupted 1.2 s in)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt | Terminated):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _forget_handled_interrupt() -> None:
    """Clear CPython's "unhandled Ctrl-C" mark once :func:`main` has handled the Ctrl-C.

    A Ctrl-C that interrupts a nested interpreter run (``PyRun_String``, which extension modules
    call while they are imported: scipy's optimiser, 1 run in 5 of ``plenocal simulate``
    interrupted 0.8 s in) sets that process-wide mark even when the :class:`KeyboardInterrupt`
    is then handled; ``python -m plenocal`` then ends by killing itself with SIGINT (return code
    −2) after its "interrupted" line, instead of exiting 130. A nested run of ``pass`` starts by
    clearing the mark (``run_eval_code_obj``) and sets nothing. A Python without ``pythonapi``
    (not CPython) has no such mark."""
    try:
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"pass")
    except (ImportError, AttributeError, OSError):  # pragma: no cover - not CPython
        pass


def _run_with_cache_recovery(argv: Sequence[str]) -> int:
    from plenocal.cli import _numba_cache

    try:
        return dispatch(argv)
    except Exception as exc:
        if not _numba_cache.is_cache_error(exc):
            raise
        _numba_cache.clear()  # raises a one-line PlenocalError when it cannot
    return dispatch(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``plenocal`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    where = _command(args)

    def fail(message: str, code: int = EXIT_ERROR) -> int:
        print(f"{where}: {one_line(message)}", file=sys.stderr)
        return code

    def interrupted(signal_exc: BaseException) -> int:
        _forget_handled_interrupt()
        if isinstance(signal_exc, Terminated):
            return fail("terminated (nothing of the unfinished step was written)", EXIT_TERMINATED)
        return fail("interrupted (nothing of the unfinished step was written)", EXIT_INTERRUPTED)

    try:
        with _quiet_libraries(), _sigterm_raises(), _signals_not_swallowed():
            return _run_with_cache_recovery(args)
    except CommandLineError as exc:
        print(f"{exc.prog}: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except PlenocalError as exc:
        return fail(f"error: {exc}")
    except (KeyboardInterrupt, Terminated) as exc:
        return interrupted(exc)
    except MemoryError:
        return fail("error: not enough memory for this input (check its sizes: image, lattice, number of frames)")
    except OSError as exc:
        name = exc.filename if exc.filename is not None else "I/O"
        return fail(f"error: {name}: {exc.strerror or exc} (nothing of the unfinished step was written)")
    except Exception as exc:
        signal_exc = interruption(exc)
        if signal_exc is None:
            raise
        return interrupted(signal_exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
