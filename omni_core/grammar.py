"""Bounds on a request's structured-output grammar, checked before anything compiles it.

vLLM compiles a request's ``structured_outputs`` (a choice list, a JSON schema, a regex, a
grammar) into a token automaton on the vllm stage, and the cost grows faster than the spec: on
the tiny thinker (2 CPU cores) 2 000 ``choice`` strings of 114 characters took 1.3 s, 8 000 short
ones 4.8 s, a 50 000-value ``enum`` over a minute. Every request's spec is therefore held to
:data:`MAX_GRAMMAR_CHARS` characters (its JSON text; a regex's or grammar's own length) and
:data:`MAX_ALTERNATIVES` alternatives (``choice`` entries, ``enum`` values, ``anyOf`` / ``oneOf``
branches, ``|`` of a regex or grammar): at these bounds the worst spec measured compiles in
0.36 to 0.57 s (docs/security.md). ``omni serve`` checks it while parsing the body (a 400 naming
the request's own field), the vllm stage again before vLLM sees the request.

Import-light: no vLLM, used by the server and by the stage.
"""

from __future__ import annotations

import json
from typing import Any

from omni_core.errors import RequestError

# the request field a stage's structured output came from (``params.extra[GRAMMAR_FIELD]``, set
# by ``omni serve``): what a stage's grammar errors name, else ``structured_outputs.<kind>``
GRAMMAR_FIELD = "structured_output_field"
MAX_GRAMMAR_CHARS = 32_768
MAX_ALTERNATIVES = 1_000
# vLLM's StructuredOutputsParams constraints, in the order vLLM reads them
KINDS = ("json", "json_object", "regex", "choice", "grammar", "structural_tag")


class GrammarError(RequestError):
    """A request's structured output cannot be used: over the bounds, or a grammar that admits no
    output (e.g. the JSON schema ``{"$ref": "#"}``, which refers only to itself). A 400; ``param``
    names the request's field."""


def spec_kind(spec: dict[str, Any]) -> str | None:
    """The constraint a ``structured_outputs`` mapping sets (vLLM reads the first of
    :data:`KINDS` that is set), or None."""
    for kind in KINDS:
        if spec.get(kind) not in (None, False):
            return kind
    return None


def _text(value: Any) -> str | None:
    """The spec's JSON text (None: nested too deeply to write)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), default=str)
    except RecursionError:
        return None
    except (TypeError, ValueError):  # a cycle cannot come from JSON; say something sane anyway
        return str(value)


def _alternatives(value: Any) -> int:
    """``enum`` values and ``anyOf`` / ``oneOf`` branches of a JSON schema, all levels (an
    explicit stack: no recursion limit to hit)."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, sub in node.items():
                if key in ("enum", "anyOf", "oneOf") and isinstance(sub, list):
                    count += len(sub)
                stack.append(sub)
        elif isinstance(node, list):
            stack.extend(node)
    return count


def size_problem(spec: dict[str, Any]) -> tuple[str, str] | None:
    """``(kind, why)`` when the spec's constraint is over :data:`MAX_GRAMMAR_CHARS` or
    :data:`MAX_ALTERNATIVES`, else None."""
    kind = spec_kind(spec)
    if kind is None or kind == "json_object":
        return None
    value = spec[kind]
    text = _text(value)
    if text is None:
        return kind, "nested too deeply to compile"
    if len(text) > MAX_GRAMMAR_CHARS:
        return kind, (
            f"{len(text)} characters, over this server's limit of {MAX_GRAMMAR_CHARS} for a "
            "structured-output spec (its compile time grows faster than its size)"
        )
    if kind == "choice":
        alternatives = len(value) if isinstance(value, list) else text.count("|") + 1
    elif kind in ("regex", "grammar"):
        alternatives = text.count("|") + 1
    else:
        try:
            alternatives = _alternatives(json.loads(text) if isinstance(value, str) else value)
        except RecursionError:
            return kind, "nested too deeply to compile"
        except ValueError:  # not JSON: vLLM's own validation says so
            alternatives = 0
    if alternatives > MAX_ALTERNATIVES:
        what = "choices" if kind == "choice" else "alternatives (enum values, anyOf/oneOf, '|')"
        return kind, (
            f"{alternatives} {what}, over this server's limit of {MAX_ALTERNATIVES} for a "
            "structured-output spec (its compile time grows faster than its size)"
        )
    return None


def check_size(spec: dict[str, Any], field: str | None = None) -> None:
    """Raise :class:`GrammarError` naming ``field`` (default ``structured_outputs.<kind>``) when
    the spec is over the bounds."""
    problem = size_problem(spec)
    if problem is not None:
        kind, why = problem
        where = field or f"structured_outputs.{kind}"
        raise GrammarError(f"'{where}': {why}", param=where)


def grammar_field(params: Any) -> str:
    """The request field a stage's structured output came from: ``params.extra[GRAMMAR_FIELD]``
    where ``omni serve`` set it, else ``structured_outputs.<kind>``."""
    field = params.extra.get(GRAMMAR_FIELD)
    if isinstance(field, str) and field:
        return field
    spec = params.extra.get("vllm", {}).get("structured_outputs")
    kind = spec_kind(spec) if isinstance(spec, dict) else None
    return f"structured_outputs.{kind}" if kind else "structured_outputs"
