"""Errors that suggest the fix: the closest option or pipeline name to a typo.

``omni run`` takes its plugins' options as unknown arguments (they depend on the pipeline), so
click cannot refuse a typo of one of its own options there: :func:`check_run_flags` does, before
the pipeline is loaded. A global option after the command (``omni run X --debug``) is refused
with where it goes.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import typer

from omni_core.errors import ConfigError

# omni's global options, valid before the command only (``omni --debug run ...``)
GLOBAL_FLAGS = ("--debug", "--verbose", "--log-level", "--trace-hooks")


def _click_class(name: str) -> type[Exception]:
    """Typer's click exception class ``name`` (recent typer vendors click, older typer uses it)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


UsageError = _click_class("UsageError")
NoSuchOption: type[Exception] = vars(sys.modules[UsageError.__module__])["NoSuchOption"]


def closest(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates closest to ``word`` (difflib's ratio >= 0.75: a typo, not a longer
    option that merely contains one of ours), best first."""
    return difflib.get_close_matches(word, sorted(set(candidates)), n=n, cutoff=0.75)


def did_you_mean(matches: Sequence[str]) -> str:
    """``Did you mean X?`` / ``Did you mean X or Y?`` (empty without matches)."""
    if not matches:
        return ""
    if len(matches) == 1:
        return f"Did you mean {matches[0]}?"
    return f"Did you mean {', '.join(matches[:-1])} or {matches[-1]}?"


def no_such_option_message(flag: str, known: Iterable[str], command: str = "omni run") -> str:
    """``No such option: --promt. Did you mean --prompt?``; a global option after the command
    says where it goes."""
    if flag in GLOBAL_FLAGS:
        rest = command.split(" ", 1)[1] if " " in command else "COMMAND"
        return (
            f"No such option: {flag} (a global option: put it before the command: "
            f"omni {flag} {rest} ...)"
        )
    hint = did_you_mean(closest(flag, known))
    return f"No such option: {flag}" + (f". {hint}" if hint else "")


def usage_message(exc: Exception) -> str:
    """A click usage error's message, with our wording for an unknown option."""
    name = getattr(exc, "option_name", None)
    if type(exc).__name__ == "NoSuchOption" and isinstance(name, str):
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "omni"
        known: list[str] = []
        if ctx is not None:
            known = [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)]
            known = [o for o in known if o.startswith("-")]
        return no_such_option_message(name, known, command)
    return str(exc.format_message())  # type: ignore[attr-defined]


def check_run_flags(
    tokens: Sequence[str], own: Iterable[str], plugin_flags: Iterable[str], ctx: Any
) -> None:
    """``omni run``'s unknown arguments (``tokens``: a PIPELINE that looks like an option, then
    what click left over), checked before the pipeline loads: an option that is none of any
    installed plugin's and is close to one of ``own`` (or a global option) is a click
    ``NoSuchOption`` (exit 2) suggesting the fix. Others are left to the pipeline's plugins'
    parser (:func:`omni_core.cli.run_options.parse_args`)."""
    own = set(own)
    plugin_flags = set(plugin_flags)
    rest = iter(tokens)
    for token in rest:
        if not token.startswith("-") or token in ("-", "--"):
            continue
        flag, eq, _ = token.partition("=")
        if flag in plugin_flags:
            if not eq:
                next(rest, None)  # its value, whatever it looks like
            continue
        if flag in GLOBAL_FLAGS or closest(flag, own):
            raise _no_such_option(flag, own, ctx)


def _no_such_option(flag: str, known: Iterable[str], ctx: Any) -> Exception:
    command = ctx.command_path if ctx is not None else "omni run"
    return NoSuchOption(flag, message=no_such_option_message(flag, known, command), ctx=ctx)  # type: ignore[call-arg]


def unknown_pipeline(error: ConfigError, name: str, registered: Iterable[str]) -> ConfigError:
    """``error`` (an unknown pipeline ``name``) with the closest registered names suggested."""
    hint = did_you_mean(closest(name, registered))
    if not hint or len(error.problems) != 1:
        return error
    better = ConfigError([f"{error.problems[0]}. {hint}"])
    better.__cause__ = error
    return better
