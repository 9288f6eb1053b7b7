"""Plugins' flags of ``omni run PIPELINE`` (``omni_register_run_options``): which a pipeline
accepts, their ``--help`` listing, and the command line's unknown arguments parsed against them
into the request-level ``params.extra``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omni_core.errors import PluginConflictError, PluginError, RequestError

if TYPE_CHECKING:
    from omni_core.config.resolve import ResolvedPipeline
    from omni_core.plugin.hooks import PluginHost
    from omni_core.plugin.types import RunOption

Options = dict[str, tuple[str, "RunOption"]]  # "--flag" -> (plugin, option)


def pipeline_options(host: PluginHost, pipeline: ResolvedPipeline, core: set[str]) -> Options:
    """The flags of the plugins taking part in ``pipeline``, by ``--flag``. Every registered flag
    is checked first: one named like an ``omni run`` option in ``core`` (or provided by two
    plugins) is a :class:`PluginConflictError` naming both."""
    from omni_core.plugin.scope import active_plugins

    registered = host.run_options()
    for name, (plugin, _) in registered.items():
        if f"--{name}" in core:
            raise PluginConflictError(
                f"RunOption '--{name}' is provided by plugin '{plugin}' and is one of omni run's "
                "own options (omni-core)"
            )
    active = active_plugins(host, pipeline)
    return {
        f"--{name}": (plugin, option)
        for name, (plugin, option) in sorted(registered.items())
        if plugin in active
    }


def describe(options: Options, pipeline_name: str) -> str:
    """The ``--help`` section listing a pipeline's plugin flags."""
    if not options:
        return f"Pipeline '{pipeline_name}' takes no plugin options."
    import textwrap

    lines = [f"Options of pipeline '{pipeline_name}' (from its plugins):"]
    heads = {flag: f"{flag} {option.metavar}" for flag, (_, option) in options.items()}
    width = max(len(head) for head in heads.values())
    for flag, (plugin, option) in options.items():
        text = textwrap.wrap(f"{option.help} [{plugin}]".strip(), max(40, 78 - width))
        lines.append(f"  {heads[flag]:<{width}}  {text[0]}")
        lines += [f"  {'':<{width}}  {rest}" for rest in text[1:]]
    return "\n".join(lines)


def _unknown(token: str, options: Options, pipeline_name: str) -> RequestError:
    from omni_core.cli.suggest import closest, did_you_mean

    what = "no such option" if token.startswith("-") else "unexpected argument"
    hint = did_you_mean(closest(token.partition("=")[0], options)) if token[:1] == "-" else ""
    known = ", ".join(options) or "none"
    return RequestError(
        f"{token}: {what} of omni run for pipeline '{pipeline_name}'"
        + (f". {hint}" if hint else "")
        + f" (its plugins' options: {known}; a plugin's options exist only where it is installed "
        f"and takes part; omni run {pipeline_name} --help lists every option)"
    )


def parse_args(
    args: list[str], options: Options, pipeline_name: str, extra: dict[str, Any]
) -> None:
    """``--flag VALUE`` / ``--flag=VALUE`` arguments into ``extra`` (merged key by key).

    An unknown flag or argument, a missing value, a flag given twice, a value its ``parse`` or
    ``to_extra`` refuses (ValueError/TypeError) and two flags setting one field differently are
    each a :class:`RequestError` naming the flag(s); anything else an option's callables raise, or
    a ``to_extra`` that returns no mapping, is a :class:`PluginError` naming the plugin.
    """
    given: dict[str, str] = {}
    index = 0
    while index < len(args):
        token = args[index]
        flag, eq, text = token.partition("=")
        if flag not in options:
            raise _unknown(token, options, pipeline_name)
        if not eq:
            if index + 1 >= len(args):
                raise RequestError(f"{flag}: expects a value ({options[flag][1].metavar})")
            index += 1
            text = args[index]
        if flag in given:
            raise RequestError(f"{flag}: given twice")
        given[flag] = text
        index += 1
    owners: dict[tuple[str, ...], str] = {}  # field path -> the flag that set it
    for flag, text in given.items():
        plugin, option = options[flag]
        try:
            fragment = option.to_extra(option.parse(text))
        except (ValueError, TypeError) as exc:
            raise RequestError(f"{flag} {text}: {exc}") from None
        except Exception as exc:
            raise PluginError(
                f"plugin '{plugin}': option {flag} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(fragment, Mapping):
            raise PluginError(
                f"plugin '{plugin}': option {flag}'s to_extra returned "
                f"{type(fragment).__name__}, expected a mapping"
            )
        _merge(extra, fragment, (), flag, owners)


def _merge(
    target: dict[str, Any],
    fragment: Mapping[str, Any],
    path: tuple[str, ...],
    flag: str,
    owners: dict[tuple[str, ...], str],
) -> None:
    for key, value in fragment.items():
        where = (*path, str(key))
        current = target.get(key)
        if isinstance(value, Mapping) and (current is None or isinstance(current, dict)):
            _merge(target.setdefault(key, {}), value, where, flag, owners)
            continue
        if key in target and current != value:
            other = owners.get(where, "omni run's own options")
            raise RequestError(
                f"{flag} and {other} set extra field '{'.'.join(where)}' to different values"
            )
        target[key] = value
        owners[where] = flag


def check_declared_voice(host: PluginHost, pipeline: ResolvedPipeline, voice: str | None) -> None:
    """``--voice NAME`` against the voices the plugins taking part in ``pipeline`` declare
    (``omni_pipeline_voices``), before any stage starts: a voice outside them is a
    :class:`RequestError` naming them (and the closest); where no plugin declares any, the
    speaking stage checks the voice when the request reaches it."""
    if voice is None:
        return
    from omni_core.cli.suggest import closest, did_you_mean
    from omni_core.plugin.scope import active_plugins

    active = active_plugins(host, pipeline)
    try:
        answers = host.results_by_plugin("omni_pipeline_voices", pipeline=pipeline)
    except Exception as exc:
        notes = "; ".join(getattr(exc, "__notes__", ()))
        raise PluginError(
            f"omni_pipeline_voices raised {type(exc).__name__}: {exc}"
            + (f" ({notes})" if notes else "")
        ) from exc
    declared: set[str] | None = None
    for plugin, answer in answers:
        if plugin not in active:
            continue
        names = [answer] if isinstance(answer, str) else list(answer)
        if isinstance(answer, str) or not all(isinstance(n, str) for n in names):
            raise PluginError(
                f"plugin '{plugin}': omni_pipeline_voices returned {answer!r}, not an iterable "
                "of voice names"
            )
        declared = (declared or set()) | set(names)
    if declared is None or voice in declared:
        return
    hint = did_you_mean(closest(voice, declared))
    raise RequestError(
        f"--voice {voice}: pipeline '{pipeline.config.name}' has no voice '{voice}' (its voices: "
        f"{', '.join(sorted(declared)) or 'none'})" + (f". {hint}" if hint else "")
    )
