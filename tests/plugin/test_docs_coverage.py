"""Docs a plugin author can finish from: every hookspec has a section in docs/hooks.md headed by
its exact signature (datasette's test_plugin_hooks_are_documented), every public name and every
query method of PluginHost has a docstring (the API reference renders them), the msgspec data
types render their fields, and the docs build fails on an unresolved cross-reference."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import omni_core
from omni_core import hookspecs
from omni_core.plugin.hooks import PluginHost

ROOT = Path(__file__).resolve().parents[2]
HOOKS_MD = (ROOT / "docs" / "hooks.md").read_text()
DEPRECATED = {"request_id"}  # a spec argument kept for API 2 impls; documented in the table
SPECS = sorted(n for n, f in vars(hookspecs).items() if hasattr(f, "omni_core_spec"))


@pytest.mark.parametrize("name", SPECS)
def test_every_hookspec_has_a_section_headed_by_its_signature(name):
    params = [p for p in inspect.signature(getattr(hookspecs, name)).parameters]
    shown = ", ".join(p for p in params if not (p in DEPRECATED and "run_id" in params))
    headings = re.findall(rf"^### `{name}\(([^)]*)\)", HOOKS_MD, flags=re.M)
    assert headings, f"docs/hooks.md has no '### `{name}(...)`' section"
    assert headings == [shown], f"docs/hooks.md documents {name}({headings[0]}), spec: ({shown})"


def test_every_public_name_has_a_docstring():
    undocumented = []
    for name in omni_core.__all__:
        obj = getattr(omni_core, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not (obj.__doc__ or "").strip():
                undocumented.append(name)
    assert undocumented == []


def test_every_query_method_of_plugin_host_is_documented():
    public = [n for n, f in vars(PluginHost).items() if callable(f) and not n.startswith("_")]
    assert [n for n in public if not (getattr(PluginHost, n).__doc__ or "").strip()] == []
    listed = PluginHost.__doc__ or ""
    queries = ["stage_kinds", "bridges", "pipelines", "cli_groups", "hooks_of", "registered"]
    assert [q for q in queries if f":meth:`{q}`" not in listed] == []


def test_the_data_types_render_their_fields():
    for page, names in {
        "outputs.md": ["OmniRequestOutput", "StageOutput", "StageResult", "ErrorInfo"],
        "requests.md": ["StageRequest"],
    }.items():
        text = (ROOT / "docs" / "api" / page).read_text()
        for name in names:
            pattern = (
                rf"::: omni_core\.[\w.]+\.{name}\n    options:\n      show_if_no_docstring: true"
            )
            assert re.search(pattern, text), f"docs/api/{page}: {name}'s fields are not rendered"


def _hook_module():
    spec = importlib.util.spec_from_file_location("public_names", ROOT / "docs/api/public_names.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class _Page:
    class file:  # mkdocs' page.file.src_uri
        src_uri = "x.md"


def test_an_unresolved_cross_reference_fails_the_docs_build(caplog):
    hook = _hook_module()
    html = (
        "<td>[<code>hookimpl</code>][pluggy._decorators.hookimpl]</td>"
        "<p><code>bound[stage][replica]</code></p><pre>x[a][b]</pre>"
    )
    with caplog.at_level("WARNING", logger="mkdocs"):
        assert hook.on_post_page(html, _Page) == html
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["x.md: unresolved cross-reference [pluggy._decorators.hookimpl]"]
    assert caplog.records[0].name.startswith("mkdocs.")  # counted by mkdocs --strict
