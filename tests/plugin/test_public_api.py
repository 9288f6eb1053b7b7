"""First-party plugins use only omni-core's public API: no ``_``-prefixed attribute of a core
object, every omni-core import a manifest name from its public module (``omni_core.public``)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import textwrap
from pathlib import Path

import pytest

from omni_core.public import TIERS, moved_imports, names_of, public_modules
from omni_core.testing.public_api import public_api_violations

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(ROOT.glob("plugins/*/src")) + sorted(ROOT.glob("examples/*/src"))

# Core modules a first-party plugin may still import while it is being written (each entry for
# the integrator to resolve). Empty: the model plugins host their engines through
# omni_core.kinds.torch_kind (TorchStageEngine, error_output, default_plane, process_client,
# resolve_model, stage_model); OmniSettings comes from omni_core. Anything listed here is allowed.
PENDING: dict[str, set[str]] = {}


def test_every_plugin_source_tree_is_checked():
    names = {src.parent.name for src in SOURCES}
    assert {"cfg", "duplex", "omni-example-plugin"} <= names


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.parent.name)
def test_first_party_plugins_use_only_the_public_api(src: Path):
    pending = PENDING.get(src.parent.name, set())
    found = [
        v
        for v in public_api_violations(src, deprecated="error")
        if v.rsplit(" ", 1)[-1] not in pending
    ]
    assert found == []


@pytest.mark.parametrize(
    "tests", sorted(ROOT.glob("examples/*/tests")), ids=lambda p: p.parent.name
)
def test_the_example_plugins_tests_use_only_public_names(tests: Path):
    """A plugin author copies the example's tests: they import only public names too."""
    assert public_api_violations(tests, deprecated="error") == []


def test_public_modules_exist():
    missing = [m for m in sorted(public_modules()) if importlib.util.find_spec(m) is None]
    assert missing == []


def test_the_check_finds_private_access_and_non_public_imports(tmp_path: Path):
    package = tmp_path / "mine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(
        textwrap.dedent(
            """
            import omni_core.engine.runtime
            from omni_core import NotPublic, OmniEngine, _LAZY
            from omni_core.orchestrator.state import RunState
            from omni_core.plugin import OrchestratorPort, RequestView
            from omni_core.extend import OrchestratorBase


            class Mine(OrchestratorBase):
                __slots__ = ("_slot",)

                def __init__(self, model):
                    self._cache = {}
                    self.weights = model._from_config  # another library's private: not ours

                async def _handle_message(self, msg):  # overrides a private of the core
                    return await super()._handle_message(msg)

                def streams(self, engine):
                    return engine._runtime.streams, self._cache, self._slot, type(self).__name__
            """
        )
    )
    found = public_api_violations(tmp_path)
    assert found == [
        "mine/plugin.py:2: imports non-public module omni_core.engine.runtime",
        "mine/plugin.py:3: imports NotPublic from omni_core (not public)",
        "mine/plugin.py:3: imports private name _LAZY from omni_core",
        "mine/plugin.py:4: imports RunState from non-public module omni_core.orchestrator.state",
        "mine/plugin.py:17: uses super()._handle_message (an omni-core base's private member)",
        "mine/plugin.py:20: uses private attribute ._runtime of an omni-core object",
    ]


def test_the_imports_the_docs_prescribe_pass_the_check(tmp_path: Path):
    """docs/plugins.md tells plugin authors to import these: the check must accept them."""
    package = tmp_path / "mine"
    package.mkdir()
    (package / "test_mine.py").write_text(
        textwrap.dedent(
            """
            from omni_core.testing.fixtures import FakeEntryPoints
            from omni_core.testing.public_api import public_api_violations
            from omni_core.testing.server import running_server
            import omni_core.testing.fixtures
            """
        )
    )
    assert public_api_violations(tmp_path) == []


def test_an_old_import_path_still_imports_but_the_check_names_the_public_one(tmp_path: Path):
    from omni_core import hookimpl  # the root's pre-tier names stay importable
    from omni_core.plugin import hookimpl as public
    from omni_core.views import RequestView  # noqa: F401

    assert hookimpl is public
    package = tmp_path / "mine"
    package.mkdir()
    (package / "old.py").write_text(
        "from omni_core import hookimpl\n"
        "from omni_core.views import RequestView\n"
        "from omni_core.kinds.torch_kind import TorchStageEngine\n"
        "from omni_core.plugin import create_engine\n"
    )
    assert public_api_violations(tmp_path, deprecated="error") == [
        "mine/old.py:1: imports hookimpl from omni_core (not public): public in omni_core.plugin",
        "mine/old.py:2: imports RequestView from non-public module omni_core.views: public in "
        "omni_core.plugin",
        "mine/old.py:3: imports TorchStageEngine from non-public module "
        "omni_core.kinds.torch_kind: public in omni_core.extend",
        "mine/old.py:4: imports create_engine from omni_core.plugin (not public): public in "
        "omni_core",
    ]
    # by default the API 2 paths (1-3) are accepted until API 4, each with a warning; 4 never
    # was a public path
    with pytest.warns(DeprecationWarning) as warned:
        found = public_api_violations(tmp_path)
    assert found == [
        "mine/old.py:4: imports create_engine from omni_core.plugin (not public): public in "
        "omni_core",
    ]
    assert [str(w.message).split(": an API 2")[0] for w in warned] == [
        "mine/old.py:1: imports hookimpl from omni_core: public in omni_core.plugin",
        "mine/old.py:2: imports RequestView from non-public module omni_core.views: public in "
        "omni_core.plugin",
        "mine/old.py:3: imports TorchStageEngine from non-public module "
        "omni_core.kinds.torch_kind: public in omni_core.extend",
    ]


def api2_imports() -> list[str]:
    """An import line for every API 2 path of a name API 3 moved (the migration guide's rows)."""
    return [
        f"from {module} import {name}"
        for module, names in moved_imports().items()
        for name in names
    ]


def test_every_api2_import_still_imports_and_passes_the_check_with_a_warning(tmp_path: Path):
    lines = api2_imports()
    assert len(lines) >= 14 and "from omni_core.kinds.torch_kind import stage_model" in lines
    assert "from omni_core.plugin.types import StageKind" in lines
    assert "from omni_core.stage.client import StageContext" in lines
    package = tmp_path / "old"
    package.mkdir()
    (package / "plugin.py").write_text(
        "\n".join([*lines, "import omni_core.plugin.types", "from omni_core.plugin import types"])
        + "\n"
    )
    with pytest.warns(DeprecationWarning) as warned:
        assert public_api_violations(tmp_path) == []
    assert len(warned) == len(lines) + 2
    assert len(public_api_violations(tmp_path, deprecated="error")) == len(lines) + 2
    with pytest.warns(DeprecationWarning):  # the root's moved names warn when imported
        for line in lines:
            exec(line, {})


def test_a_moved_root_name_warns_naming_its_public_module():
    with pytest.warns(
        DeprecationWarning, match=r"import hookimpl'.*import it from omni_core\.plugin"
    ):
        from omni_core import hookimpl  # noqa: F401


def migration_rows() -> list[str]:
    """The rows of the migration guide's import table: an API 2 module, the names it gave that
    moved to one public module, and that module."""
    groups: dict[tuple[str, str], list[str]] = {}
    for module, names in moved_imports().items():
        for name, homes in names.items():
            home = " and ".join(f"`{h}`" for h in homes) or "not public"
            groups.setdefault((module, home), []).append(f"`{name}`")
    return [f"| `{m}` | {', '.join(names)} | {home} |" for (m, home), names in groups.items()]


def test_the_migration_guide_lists_every_moved_import():
    text = (ROOT / "docs" / "plugins.md").read_text()
    guide = text.split("## Migrating from API 2 to API 3", 1)[1]
    assert [row for row in migration_rows() if row not in guide] == []


def test_root_all_is_the_embedders_tier():
    import omni_core

    assert omni_core.__all__ == list(TIERS[0].modules["omni_core"])
    assert TIERS[0].module == "omni_core"
    assert [t.module for t in TIERS] == [
        "omni_core",
        "omni_core.plugin",
        "omni_core.extend",
        "omni_core.family",
        "omni_core.testing",
    ]


@pytest.mark.parametrize("module", sorted(public_modules()))
def test_every_manifest_name_imports_from_its_public_module(module: str):
    public = importlib.import_module(module)
    for name, home in names_of(module).items():
        assert getattr(public, name) is getattr(importlib.import_module(home), name), name
        assert name in dir(public)


def test_a_name_has_one_public_module():
    seen: dict[str, str] = {}
    for tier in TIERS:
        for module, names in tier.modules.items():
            for name in names:
                assert name not in seen, f"{name}: public in {seen[name]} and {module}"
                seen[name] = module


@pytest.mark.parametrize(
    "module", ["omni_core", "omni_core.plugin", "omni_core.extend", "omni_core.family"]
)
def test_a_tier_modules_type_checking_imports_are_its_manifest_names(module: str):
    """The lazy re-exports are typed through ``if TYPE_CHECKING:`` imports: exactly the
    manifest's names, each from its defining module."""
    path = importlib.util.find_spec(module).origin  # type: ignore[union-attr]
    tree = ast.parse(Path(path).read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    )
    imported = {
        a.name: n.module for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names
    }
    expected = {name: home for name, home in names_of(module).items() if home != module}
    assert imported == expected


def test_the_imports_in_the_docs_pass_the_check(tmp_path: Path):
    """Every ``from omni_core... import`` / ``import omni_core...`` line in the guides and the
    README is a public import."""
    lines = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines += [
            m.group(1)
            for m in re.finditer(
                r"^\s*((?:from omni_core[\w.]* import [^(\n]+|import omni_core[\w.]*))$",
                page.read_text(),
                flags=re.M,
            )
        ]
    assert len(lines) >= 4
    package = tmp_path / "docs"
    package.mkdir()
    (package / "imports.py").write_text("\n".join(lines) + "\n")
    assert public_api_violations(tmp_path) == []


def test_reading_a_core_module_by_name_is_refused(tmp_path: Path):
    """A string coupling the import check cannot see: a core module named in a call."""
    package = tmp_path / "mine"
    package.mkdir()
    (package / "files.py").write_text(
        "from importlib import resources, import_module\n"
        'text = resources.files("omni_core.pipelines").joinpath("tiny-omni.yaml").read_text()\n'
        'views = import_module("omni_core.views")\n'
        'kit = import_module("omni_core.testing.fixtures")\n'
        'group = print("omni_core.plugins are entry points; omni_core is a package")\n'
    )
    assert public_api_violations(tmp_path) == [
        "mine/files.py:2: reads omni-core module omni_core.pipelines by name",
        "mine/files.py:3: reads omni-core module omni_core.views by name",
    ]


def _docs_hook():
    spec = importlib.util.spec_from_file_location("public_names", ROOT / "docs/api/public_names.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_api_reference_renders_exactly_the_manifests_names():
    """Every public name is rendered (by a hand-written page or a page's tier marker, which the
    mkdocs hook fills from the manifest), and every single object the pages render is public."""
    hook = _docs_hook()
    pages = [p.read_text() for p in sorted((ROOT / "docs" / "api").glob("*.md"))]
    marked = {m for text in pages for m in re.findall(r"<!-- tier: ([\w.]+) -->", text)}
    hand = [text for text in pages if "<!-- tier:" not in text]
    missing = [
        ident
        for module in sorted(public_modules() - marked)
        for ident in hook.unrendered(module, hand)
    ]
    assert missing == []
    public = {f"{home}.{name}" for m in public_modules() for name, home in names_of(m).items()}
    objects = {
        ident
        for ident in hook.rendered(hand)
        if importlib.util.find_spec(ident.rsplit(".", 1)[0]) and not _is_module(ident)
    }
    assert sorted(objects - public) == []


def _is_module(ident: str) -> bool:
    try:
        return importlib.util.find_spec(ident) is not None
    except ModuleNotFoundError:
        return False


def test_every_manifest_name_has_a_docstring():
    undocumented = []
    for module in sorted(public_modules()):
        for name, home in names_of(module).items():
            obj = getattr(importlib.import_module(home), name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not (
                obj.__doc__ or ""
            ).strip():
                undocumented.append(f"{home}.{name}")
    assert undocumented == []
