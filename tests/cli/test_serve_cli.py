"""``omni serve``'s command line: its help shows the host/port defaults, and with no PIPELINE it
serves the same pipeline ``omni run`` runs (issue 41)."""

from __future__ import annotations

import types

import pytest

from omni_core import PLUGIN_API_VERSION, PipelineConfig, hookimpl
from omni_core.plugin import PipelineSpec


def test_serve_help_shows_the_host_and_port_defaults(run_cli, monkeypatch):
    code, out, _ = run_cli("serve", "--help")
    assert code == 0
    assert "Bind address (default 127.0.0.1; OMNI_HOST)" in out
    assert "Port (default 8000; OMNI_PORT)" in out
    monkeypatch.setenv("OMNI_PORT", "9123")  # the help says what this environment gets
    code, out, _ = run_cli("serve", "--help")
    assert "Port (default 9123; OMNI_PORT)" in out


def marked_default() -> types.ModuleType:
    module = types.ModuleType("fake_default")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
    yaml = "name: favourite\nstages:\n  - {id: 0, name: a, kind: scripted, final_output: true}\n"

    @hookimpl
    def omni_register_pipelines():
        return [
            PipelineSpec("favourite", lambda: PipelineConfig.from_yaml_text(yaml), default=True)
        ]

    module.omni_register_pipelines = omni_register_pipelines
    return module


@pytest.mark.parametrize("marked", [False, True])
def test_serve_and_run_default_to_the_same_pipeline(
    run_cli, fake_entry_points, monkeypatch, marked
):
    import omni_core.serve.server as server

    if marked:
        fake_entry_points.add("fav", marked_default())
    served = []
    monkeypatch.setattr(server, "run_server", lambda config, **_: served.append(config.name))
    code, _, err = run_cli("serve")
    assert code == 0, err
    assert served == ["favourite" if marked else "tiny-omni"]
