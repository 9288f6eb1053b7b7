"""Checks that a plugin's source uses only omni-core's public API.

:func:`public_api_violations` reads a package's Python files (it imports nothing) and reports

* an import from omni-core that is not a public name of the public module it is imported from
  (the manifest, :mod:`omni_core.public`: ``from omni_core.plugin import hookimpl`` is public,
  ``from omni_core import hookimpl`` and ``from omni_core.views import RequestView`` still
  import but are not: the report names the public module instead), and an ``import`` of a module
  that is not one of the manifest's public modules, or a call naming a non-public omni-core
  module in a string (``resources.files("omni_core.pipelines")``, ``import_module(...)``);
* an import of a ``_``-prefixed name from omni-core;
* an attribute access ``x._name`` where ``_name`` is a private name omni-core defines and the
  package itself does not (``self._cache`` of the plugin's own class is fine, ``engine._runtime``
  is not; a private of another library, ``model._from_config``, is not omni-core's business),
  and any ``super()._name`` of a name omni-core defines. Dunder names are allowed.

An import plugin API 2 documented as public (``from omni_core import hookimpl``,
``omni_core.plugin.types``, ``omni_core.stage.client``, ``omni_core.kinds.torch_kind``, ...:
:func:`omni_core.public.is_api2_path`) keeps working until plugin API 4: by default
(``deprecated="warn"``) it is not reported but warned about, one ``DeprecationWarning`` per use
naming the public module to import it from; ``deprecated="error"`` reports it like any other
non-public import (omni-core's own plugins are checked so).

Plugin authors can run it on their own package in a test::

    from omni_core.testing.public_api import public_api_violations

    def test_my_plugin_uses_the_public_api_only():
        assert public_api_violations(Path(__file__).parents[1] / "src") == []
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import omni_core
from omni_core.public import home_of, is_api2_path, names_of, public_modules

CORE = "omni_core"
_MODULE_PATH = re.compile(r"omni_core(\.[a-z_]\w*)+$")


def public_api_violations(
    root: Path,
    *,
    core_names: Iterable[str] | None = None,
    deprecated: Literal["warn", "error"] = "warn",
) -> list[str]:
    """``"path:line: what"`` for every use of a non-public part of omni-core under ``root`` (a
    package directory, or a ``src`` directory holding packages), sorted by path and line.
    ``core_names``: the names public in ``omni_core`` itself (default: ``omni_core.__all__``).
    ``deprecated``: an import path plugin API 2 made public is a ``DeprecationWarning``
    (``"warn"``, the default: not in the list) or a violation like the others (``"error"``)."""
    if deprecated not in ("warn", "error"):
        raise ValueError(f"deprecated must be 'warn' or 'error', not {deprecated!r}")
    files = sorted(p for p in Path(root).rglob("*.py") if p.is_file())
    trees = {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in files}
    own: set[str] = set()
    for tree in trees.values():
        own |= _defined_names(tree)
    core_private = core_private_names()
    public_names = set(omni_core.__all__ if core_names is None else core_names)
    found: list[str] = []
    for path, tree in trees.items():
        where = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        problems = sorted(_check(tree, core_private, own, public_names), key=lambda p: p[0])
        for line, what, old in problems:
            if old and deprecated == "warn":
                warnings.warn(
                    f"{where}:{line}: {what.replace(' (not public)', '')}: an API 2 import path, "
                    "deprecated, removed in plugin API 4 (docs/plugins.md#migrating-from-api-2-"
                    "to-api-3)",
                    DeprecationWarning,
                    stacklevel=2,
                )
            else:
                found.append(f"{where}:{line}: {what}")
    return found


@functools.cache
def core_private_names() -> frozenset[str]:
    """Every ``_``-prefixed, non-dunder name omni-core's own source defines."""
    names: set[str] = set()
    for path in Path(omni_core.__file__).parent.rglob("*.py"):
        names |= _defined_names(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return frozenset(name for name in names if _private(name))


def _defined_names(tree: ast.AST) -> set[str]:
    """Every ``_``-prefixed name the code defines: functions, classes, assigned names and
    attributes, parameters, imports under an alias, ``__slots__`` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                e.value
                for e in ast.walk(node.value)
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    return {name for name in names if name.startswith("_")}


def _check(
    tree: ast.AST, core_private: frozenset[str], own: set[str], public_names: set[str]
) -> Iterable[tuple[int, str, bool]]:
    """``(line, what, an API 2 path)`` per problem."""
    modules = public_modules()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_core(alias.name) and alias.name not in modules:
                    parent, _, last = alias.name.rpartition(".")
                    old = is_api2_path(parent, last)
                    yield node.lineno, f"imports non-public module {alias.name}", old
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_core(node.module):
            module = node.module or ""
            for alias in node.names:
                name = alias.name
                if name.startswith("_"):
                    yield node.lineno, f"imports private name {name} from {module}", False
                    continue
                public = public_names if module == CORE else names_of(module)
                if name in public or f"{module}.{name}" in modules:
                    continue
                old = is_api2_path(module, name)
                if module == CORE or module in modules:
                    what = f"imports {name} from {module} (not public){_hint(name)}"
                else:
                    what = f"imports {name} from non-public module {module}{_hint(name)}"
                yield node.lineno, what, old
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and _MODULE_PATH.match(node.args[0].value)
            and node.args[0].value not in modules
        ):
            # resources.files("omni_core.pipelines"), import_module("omni_core.x"), find_spec(...)
            yield node.lineno, f"reads omni-core module {node.args[0].value} by name", False
        elif isinstance(node, ast.Attribute) and node.attr in core_private:
            if _is_super_call(node.value):
                what = f"uses super().{node.attr} (an omni-core base's private member)"
                yield node.lineno, what, False
            elif node.attr not in own:
                what = f"uses private attribute .{node.attr} of an omni-core object"
                yield node.lineno, what, False


def _hint(name: str) -> str:
    where = home_of(name)
    return f": public in {' and '.join(where)}" if where else ""


def _is_core(module: str | None) -> bool:
    return module is not None and (module == CORE or module.startswith(CORE + "."))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_super_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )
