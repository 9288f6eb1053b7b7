"""First-party plugins use only omni-core's public API: no ``_``-prefixed attribute of a core
object, no import of a core module outside ``omni_core.views.PUBLIC_MODULES``."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

from omni_core.testing.public_api import public_api_violations
from omni_core.views import PUBLIC_MODULES

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
    found = [v for v in public_api_violations(src) if v.rsplit(" ", 1)[-1] not in pending]
    assert found == []


def test_public_modules_exist():
    missing = [m for m in sorted(PUBLIC_MODULES) if importlib.util.find_spec(m) is None]
    assert missing == []


def test_the_check_finds_private_access_and_non_public_imports(tmp_path: Path):
    package = tmp_path / "mine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(
        textwrap.dedent(
            """
            import omni_core.engine.runtime
            from omni_core import NotPublic, hookimpl, _LAZY
            from omni_core.orchestrator.state import RunState
            from omni_core.views import OrchestratorPort, RequestView
            from omni_core.orchestrator.base import OrchestratorBase


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
        "mine/plugin.py:4: imports from non-public module omni_core.orchestrator.state",
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
