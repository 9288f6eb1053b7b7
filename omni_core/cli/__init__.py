"""The ``omni`` command line (typer). Errors: one stderr line per problem; exit 2 for bad input."""

from __future__ import annotations

import sys

from omni_core.cli.app import build_app, report_error


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        app = build_app(debug=debug)
        app(args=args, prog_name="omni", standalone_mode=True)
    except SystemExit:
        raise
    except BaseException as exc:  # plugin load failures while building the app
        sys.exit(report_error(exc, debug))
