"""ORCH-INV-001/002: stage clients do transport and lifecycle only; they never route."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import omni_core

ROOT = Path(omni_core.__file__).parent
CLIENT_MODULES = [
    "omni_core.stage.client",
    "omni_core.stage.local",
    "omni_core.stage.pool",
    "omni_core.stage.runtime",
    "omni_core.stage.python_kind",
    "omni_core.testing.scripted",
    "omni_core.testing.scripted_core",
    "omni_core.stage.process",
    "omni_core.stage.worker",
]


def imported_modules(module: str) -> set[str]:
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_stage_client_modules_import_nothing_of_routing():
    for module in CLIENT_MODULES:
        routing = {
            m
            for m in imported_modules(module)
            if m.startswith(("omni_core.orchestrator", "omni_core.engine"))
        }
        assert routing == set(), f"{module} imports {routing}"


def test_loading_stage_clients_loads_no_orchestrator_module():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CLIENT_MODULES)
        + "print(sorted(m for m in sys.modules if m.startswith('omni_core.orchestrator')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_stage_client_protocol_has_no_routing_surface():
    from omni_core.stage.client import StageClient

    methods = {n for n in dir(StageClient) if not n.startswith("_")}
    assert methods == {
        "start",
        "add_request",
        "add_input",
        "abort",
        "collective_rpc",
        "get_outputs",
        "is_healthy",
        "shutdown",
    }


def test_pushing_clients_add_only_a_sink_which_only_takes_outputs_and_deaths():
    from omni_core.stage.client import OutputSink, PushingStageClient, StageClient

    def public(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}

    assert public(PushingStageClient) - public(StageClient) == {"set_output_sink"}
    assert public(OutputSink) == {"push", "dead"}
