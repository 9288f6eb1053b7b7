"""The ``omni`` command line (typer). Errors: one stderr line per problem; exit 2 for bad input.

:func:`main` returns the exit code instead of exiting, so scripts and tests can call it in-process
(``omni_core.cli.main(["stages"])``); the ``omni`` script is ``sys.exit(main())``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import typer

from omni_core.cli.app import BAD_INPUT, VALUE_OPTIONS, build_app, report_error
from omni_core.cli.quiet import quiet_third_party
from omni_core.cli.suggest import usage_message

# When stdout is not a terminal, rich renders this wide: tables at their natural width, lines
# never wrapped or cut (a narrow COLUMNS set for a terminal does not apply to a pipe).
PIPE_COLUMNS = 4096


def _click_class(name: str) -> type[Exception]:
    """Typer's click exception class ``name`` (recent typer vendors click, older typer uses it)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


UsageError = _click_class("UsageError")
ClickException = _click_class("ClickException")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``omni`` with ``argv`` (default: ``sys.argv[1:]``) and return its exit code.

    0 success, 1 runtime failure, 2 bad input (a plugin that fails to load included), 130
    interrupted; see docs/cli.md. Never raises ``SystemExit``.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    verbose = _leading_flag(args, "--verbose") or _leading_flag(args, "--debug")
    with _unwrapped_when_piped(), quiet_third_party(enabled=not verbose):
        return _run(args)


def _run(args: list[str]) -> int:
    debug = _leading_flag(args, "--debug")  # after the command it is refused, not obeyed
    try:
        app = build_app(debug=debug, trace_hooks=_leading_flag(args, "--trace-hooks"))
        code = app(args=args, prog_name="omni", standalone_mode=False)
    except UsageError as exc:  # bad option, argument or command: one line, not the usage block
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as before
            exc.show()  # type: ignore[attr-defined]
            return BAD_INPUT
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else "omni"
        message = usage_message(exc)
        print(f"error: {path}: {message} (see '{path} --help')", file=sys.stderr)
        return BAD_INPUT
    except ClickException as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
        return int(getattr(exc, "exit_code", 1))
    except typer.Abort:  # end of input at a prompt
        return 130
    except SystemExit as exc:  # a command (or a plugin's) that called sys.exit
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(f"error: {exc.code}", file=sys.stderr)
        return 1
    except BaseException as exc:  # plugin load failures while building the app
        return report_error(exc, debug)
    return code if isinstance(code, int) else 0


def _leading_flag(args: list[str], flag: str) -> bool:
    """Whether a global ``flag`` comes before the command name (``omni FLAG COMMAND ...``)."""
    rest = iter(args)
    for arg in rest:
        if arg == flag:
            return True
        if arg in VALUE_OPTIONS:
            next(rest, None)
        elif not arg.startswith("-"):
            return False
    return False


@contextmanager
def _unwrapped_when_piped() -> Iterator[None]:
    """While a command runs with stdout not a terminal, rich consoles (the core's and plugin
    groups' alike) read ``COLUMNS=PIPE_COLUMNS``: nothing a script parses is wrapped or cut."""
    try:
        terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        terminal = False
    if terminal:
        yield
        return
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(PIPE_COLUMNS)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
