"""The plugin-author answers of docs/plugins.md, docs/hooks.md and docs/stages.md run as shown:
each test takes the snippet from the page itself (issue 36 item 7)."""

from __future__ import annotations

import sys
import threading
import types
from pathlib import Path

import httpx
import pytest

from omni_core import PipelineConfig
from omni_core.plugin import PLUGIN_API_VERSION, hookimpl
from omni_core.testing.server import running_server
from tests.docs.blocks import DOCS, blocks

SCRIPTED = """
name: answers
stages:
  - {id: 0, name: s, kind: scripted, engine_args: {num_tokens: 2}, final_output: true}
"""


def snippet(page: str, marker: str) -> str:
    """The one python block of docs/``page`` containing ``marker``."""
    found = [b.code for b in blocks(DOCS / page) if b.lang == "python" and marker in b.code]
    assert len(found) == 1, f"{page}: {len(found)} python blocks contain {marker!r}"
    return found[0]


def module_of(name: str, code: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType(name)
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(code, f"<{name}>", "exec"), module.__dict__)
    return module


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.finished = 0

    @hookimpl
    def omni_request_terminal(self) -> None:
        with self.lock:
            self.finished += 1

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {"finished": self.finished}


def test_a_route_finds_its_plugin_object_and_serves_sync_and_async(monkeypatch):
    code = snippet("hooks.md", "engine.plugins.pm.get_name")
    routes = module_of("omni_mine_routes", code, monkeypatch)
    routes.omni_pipeline_plugin = hookimpl(lambda pipeline, port: Counter())
    # registered under a name the module never mentions: it finds it through pluggy
    with running_server(SCRIPTED, plugins=[("chosen-by-dist", routes)]) as (base, engine, _):
        body = {"model": "answers", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 200
        assert httpx.get(f"{base}/mine/counts").json() == {"finished": 1}
        assert httpx.get(f"{base}/mine/health").json() == {"alive": True}


async def test_a_plugin_reads_its_own_settings_from_its_env_prefix(
    make_engine, fake_entry_points, monkeypatch
):
    code = snippet("plugins.md", "class MineSettings(BaseSettings)")
    mine = module_of("omni_mine_settings", code, monkeypatch)
    fake_entry_points.add("mine", mine)
    monkeypatch.setenv("OMNI_MINE_MAX_SESSIONS", "3")
    monkeypatch.setenv("OMNI_IGNORED_BY_THE_CORE", "1")  # OmniSettings ignores unknown vars
    engine = make_engine(SCRIPTED)
    settings = engine.pipeline_plugin("mine").settings
    assert (settings.voice, settings.max_sessions) == ("Chelsie", 3)
    monkeypatch.setenv("OMNI_MINE_MAX_SESSIONS", "0")
    with pytest.raises(Exception, match=r"(?s)MineSettings.*max_sessions"):
        make_engine(SCRIPTED)


@pytest.mark.engine  # a torch stage process
async def test_the_worker_engine_of_the_docs_streams_several_outputs_per_step(
    make_engine, tmp_path: Path, monkeypatch
):
    package = tmp_path / "omni_mine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "echo.py").write_text(snippet("stages.md", "class Echo(TorchStageEngine)"))
    (tmp_path / "feed.py").write_text(
        "def feed(prompt, params):\n"
        "    if prompt == 'words':\n"
        "        yield 'some words'\n"
        "        return\n"
        "    yield [1, 2, 3]\n"
        "    yield [4, 5]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = PipelineConfig.from_dict(
        {
            "name": "echo",
            "stages": [
                {
                    "id": 0,
                    "name": "feed",
                    "kind": "python",
                    "engine_args": {"callable": "feed:feed"},
                },
                {
                    "id": 1,
                    "name": "echo",
                    "kind": "torch",
                    "inputs": [{"stage": 0, "mode": "stream"}],
                    "final_output": True,
                    "final_output_type": "tokens",
                    "engine_args": {
                        "engine": "omni_mine.echo:build",
                        "env": {"PYTHONPATH": str(tmp_path)},
                        "options": {"per_step": 2},
                    },
                },
            ],
        }
    )
    engine = make_engine(config)
    outs = [o async for o in engine.generate("x")]
    assert [t for o in outs for t in o.token_ids] == [1, 2, 3, 4, 5]
    assert outs[-1].finished and outs[-1].finish_reason == "stop"
    # the default bridge forwards text: Echo.add raises ValueError, a 400 for that request only
    bad = [o async for o in engine.generate("words")]
    assert (bad[-1].error.status_code, bad[-1].error.message) == (400, "echo takes token ids")
    outs = [o async for o in engine.generate("x")]
    assert [t for o in outs for t in o.token_ids] == [1, 2, 3, 4, 5]
