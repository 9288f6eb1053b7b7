"""The ``omni`` command line (typer). Errors: one stderr line per problem; exit 2 for bad input."""

from __future__ import annotations

import sys

import typer

from omni_core.cli.app import BAD_INPUT, build_app, report_error


def _click_class(name: str) -> type[Exception]:
    """Typer's click exception class ``name`` (recent typer vendors click, older typer uses it)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


UsageError = _click_class("UsageError")
ClickException = _click_class("ClickException")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        app = build_app(debug=debug)
        code = app(args=args, prog_name="omni", standalone_mode=False)
    except UsageError as exc:  # bad option, argument or command: one line, not the usage block
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as before
            exc.show()  # type: ignore[attr-defined]
            sys.exit(BAD_INPUT)
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else "omni"
        message = exc.format_message()  # type: ignore[attr-defined]
        print(f"error: {path}: {message} (see '{path} --help')", file=sys.stderr)
        sys.exit(BAD_INPUT)
    except ClickException as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
        sys.exit(getattr(exc, "exit_code", 1))
    except typer.Abort:  # end of input at a prompt
        sys.exit(130)
    except SystemExit:
        raise
    except BaseException as exc:  # plugin load failures while building the app
        sys.exit(report_error(exc, debug))
    sys.exit(code if isinstance(code, int) else 0)
