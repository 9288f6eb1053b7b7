"""Request bodies decoded and parsed: strict JSON with a depth bound, then a request model or one
:class:`ApiError` (400) naming the first bad field by its path in the body."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel, ValidationError

from omni_core.serve.errors import ApiError

Body = TypeVar("Body", bound=BaseModel)


def decode_json(raw: bytes, max_depth: int) -> dict[str, Any]:
    """The body as a JSON object (strict JSON: no NaN/Infinity), nested at most ``max_depth``."""
    try:
        data = msgspec.json.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, f"the request body nests deeper than {max_depth} levels") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    if _depth(data, max_depth) > max_depth:
        raise ApiError(400, f"the request body nests deeper than {max_depth} levels")
    return data


def check_json_media_type(request: Any) -> None:
    """A request body must be sent as JSON (vLLM 0.32's ``validate_json_request``: the same 400
    for any other ``Content-Type``, a missing one included)."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(
            400,
            "Unsupported Media Type: Only 'application/json' is allowed (Content-Type: "
            f"{media_type or 'none'})",
            code="unsupported_media_type",
        )


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of decoded JSON, stopping once past ``limit`` (iterative: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return deepest


def parse_body(model: type[Body], data: dict[str, Any]) -> Body:
    """A request model from a decoded body, or one 400 naming the first bad field (its path in
    the body, e.g. ``messages[0].content[1].type``; ``param`` is its top-level field)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        paths = [_path_in(data, e) for e in errors]
        # a union (``content``: a string or a list of parts) reports one error per member: the
        # one that went deepest into the body is the member the caller meant
        best = max(range(len(errors)), key=lambda i: len(paths[i]))
        error, loc = errors[best], paths[best]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        raise ApiError(400, f"'{where}': {message}", param=str(loc[0]) if loc else None) from None


def _path_in(data: Any, error: Any) -> list[str | int]:
    """An error's location as a path in the body: pydantic's ``loc`` also names union members
    (``str``, ``list[...]``, a discriminated part's tag), which are not keys of the body."""
    path: list[str | int] = []
    node = data
    tagged = None
    loc = list(error["loc"])
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(part, str) and isinstance(node, dict):
            child, after = node.get(part), loc[i + 1 : i + 2]
            keyed = bool(after) and (  # a key whose value holds the next part: not a tag
                (isinstance(child, dict) and after[0] in child)
                or (isinstance(child, list) and isinstance(after[0], int))
            )
            if (
                part == node.get("type")
                and node is not tagged
                and not keyed
                and (part not in node or after != [part])
            ):
                tagged = node
                continue  # a tagged union's member, named by its tag (not a key of the body)
            if part in node or last:
                path.append(part)
                node = node.get(part)
        elif isinstance(part, str) and last and error["type"] == "missing":
            path.append(part)
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        path.append(str(error.get("ctx", {}).get("discriminator", "type")).strip("'"))
    return path
