"""Context is passed down, not looked up: stage kinds get the engine's settings and a model
resolver bound to the engine's plugin host on their ``StageContext``; only the program's entry
points (the engine factory, the CLI, the server, bench, the testing kit) build a plugin host or
read settings from the environment."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.config.pipeline import PipelineConfig
from omni_core.kinds.vocoder import make_vocoder_client
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import ModelSpec, StageKind
from omni_core.stage.client import StageContext
from omni_core.testing.scripted import make_scripted_client
from omni_core.testing.scripted_core import ScriptedArgs

ROOT = Path(__file__).resolve().parents[2]

# Where a plugin host is built / settings are read from the environment: a program's entry points.
ENTRY_POINTS = (
    "omni_core/engine/factory.py",  # create_engine: the engine's host and settings, once
    "omni_core/cli/",
    "omni_core/serve/",
    "omni_core/bench/",
    "omni_core/testing/",
    # plugins' bench modules and their `python -m` tools (entry points of their own)
    "plugins/duplex/src/omni_duplex/bench_omni.py",
    "plugins/qwen-omni/src/omni_qwen/bench.py",
    "plugins/qwen-omni/src/omni_qwen/speech_bench.py",
    "plugins/qwen-omni/src/omni_qwen/fidelity.py",  # python -m omni_qwen.fidelity
    "plugins/qwen3-omni/src/omni_qwen3/bench.py",
    "plugins/qwen3-omni/src/omni_qwen3/talker_bench.py",
    "plugins/wan/src/omni_wan/bench.py",
    "plugins/qwen3-tts/src/omni_qwen3_tts/bench.py",
    "plugins/qwen3-tts/src/omni_qwen3_tts/tts_bench.py",
    # processes' own starts: a stage worker process reads its own environment; the reference
    # generator is `python -m omni_core.config.reference`
    "omni_core/stage/worker.py",
    "omni_core/config/reference.py",
    # MediaBudget.from_settings() without settings: omni run's --audio/--image files
    # (omni_core/cli/run.py passes no budget yet); the engine's renderer passes its settings'
    "omni_core/chat_media.py",
)


def _calls(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
        if name in ("OmniSettings", "create_plugin_manager") or (
            name == "create" and owner == "PluginHost"
        ):
            found.append((node.lineno, ast.unparse(node)[:60]))
    return found


def sources() -> list[Path]:
    roots = [ROOT / "omni_core", *sorted((ROOT / "plugins").glob("*/src"))]
    return [p for root in roots for p in sorted(root.rglob("*.py"))]


def test_only_entry_points_build_a_plugin_host_or_read_settings_from_the_environment():
    assert len(sources()) > 100
    ambient = [
        f"{rel}:{line}: {call}"
        for path in sources()
        if not (rel := path.relative_to(ROOT).as_posix()).startswith(ENTRY_POINTS)
        for line, call in _calls(path)
        # PluginHost.create's own body builds the manager of the settings it is given
        if not (rel == "omni_core/plugin/hooks.py" and "create_plugin_manager" in call)
    ]
    assert ambient == [], "pass the host / settings down instead:\n" + "\n".join(ambient)


def test_the_scan_sees_each_form_of_a_lookup(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "from omni_core import OmniSettings\nimport omni_core\n"
        "a = OmniSettings()\nb = omni_core.OmniSettings(x=1)\nc = PluginHost.create()\n"
        "d = create_plugin_manager(s)\ne = host.create()\n"
    )
    assert [line for line, _ in _calls(path)] == [3, 4, 5, 6]


def model_plugin(name: str, built: list[Path]) -> types.ModuleType:
    module = types.ModuleType(f"fake_{name}")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    def build(out: Path) -> None:
        built.append(out)
        (out / "config.json").write_text("{}")

    @hookimpl
    def omni_register_models():
        return [ModelSpec("ctx-model", build, "v1")]

    module.omni_register_models = omni_register_models
    return module


def vocoder_stage() -> object:
    config = PipelineConfig.from_dict(
        {
            "name": "p",
            "stages": [
                {
                    "id": 0,
                    "name": "v",
                    "kind": "vocoder",
                    "engine_args": {"model": "ctx-model"},
                    "final_output": True,
                }
            ],
        }
    )
    return config.stages[0]


def test_a_builtin_kind_resolves_models_against_the_engine_host_not_the_environment(
    fake_entry_points, omni_settings, tmp_path, monkeypatch
):
    built: list[Path] = []
    fake_entry_points.add("mine", model_plugin("mine", built))
    monkeypatch.delenv("OMNI_DISABLE_PLUGINS", raising=False)  # the environment enables it
    settings = omni_settings.model_copy(update={"cache_dir": tmp_path})
    stage = vocoder_stage()

    enabled = StageContext.bound("p", settings, PluginHost.create(settings))
    model = make_vocoder_client(stage, 0, enabled).worker_spec()["config"]["model"]
    assert model == str(tmp_path / "models" / "ctx-model-v1") and len(built) == 1

    # disabled in code (not in the environment): the host passed down does not know the model,
    # so the name goes to the engine as given (a host built from the environment knew it)
    off = settings.model_copy(update={"disable_plugins": ["mine"]})
    disabled = StageContext.bound("p", off, PluginHost.create(off))
    assert make_vocoder_client(stage, 0, disabled).worker_spec()["config"]["model"] == "ctx-model"
    assert disabled.settings is off and disabled.models.cache_dir == tmp_path


def test_a_plugin_kind_gets_the_engine_settings_and_host(
    make_engine, fake_entry_points, omni_settings, tmp_path
):
    seen: list[StageContext] = []

    def factory(stage, replica, context):
        seen.append(context)
        return make_scripted_client(stage, replica, context)

    module = model_plugin("probe", [])

    @hookimpl
    def omni_register_stage_kinds():
        return [StageKind("probe", factory, ScriptedArgs)]

    module.omni_register_stage_kinds = omni_register_stage_kinds
    fake_entry_points.add("probe", module)
    settings = omni_settings.model_copy(update={"cache_dir": tmp_path, "max_n": 3})
    host = PluginHost.create(settings)
    engine = make_engine(
        "name: p\nstages:\n  - {id: 0, name: s, kind: probe, final_output: true}\n",
        settings=settings,
        plugins=host,
    )
    assert engine.plugins is host
    [context] = seen
    assert context.settings is settings and context.host is host
    assert context.resolve_model("ctx-model") == str(tmp_path / "models" / "ctx-model-v1")
    assert context.resolve_model("some/hub-id") == "some/hub-id"


def test_resolve_model_takes_the_context_or_a_host_not_a_cache_directory(plugin_host, tmp_path):
    from omni_core.errors import PluginError
    from omni_core.extend import resolve_model

    assert resolve_model("not-registered", plugin_host) == "not-registered"
    with pytest.raises(PluginError, match="pass the stage's StageContext"):
        resolve_model("tiny-vocoder", tmp_path)  # type: ignore[arg-type]
