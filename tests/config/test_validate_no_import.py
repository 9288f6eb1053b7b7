"""Checking a pipeline (``omni config validate``) never runs code a config names: a dotted-path
bridge is located by the import system's finders, not imported; running imports it."""

from __future__ import annotations

import sys

import pytest

from omni_core.config.pipeline import PipelineConfig
from omni_core.config.resolve import UnimportedBridge, module_locatable, resolve_pipeline
from omni_core.errors import ConfigError

SIDE_EFFECT = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


@pytest.fixture
def side_effect_package(tmp_path, monkeypatch):
    """``sfx_pkg`` (package) and ``sfx_pkg.bridge`` (module with ``make``): each writes a marker
    file when imported."""
    pkg = tmp_path / "sfx_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(SIDE_EFFECT.format(marker=str(tmp_path / "pkg-ran")))
    (pkg / "bridge.py").write_text(
        SIDE_EFFECT.format(marker=str(tmp_path / "mod-ran"))
        + "def make(sources, prompt, params):\n    return 'x'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("sfx_pkg.bridge", "sfx_pkg"):
        sys.modules.pop(name, None)


def chain(bridge: str) -> PipelineConfig:
    return PipelineConfig.from_yaml_text(
        f"""
name: x
stages:
  - {{id: 0, name: a, kind: scripted}}
  - {{id: 1, name: b, kind: scripted, inputs: [0], bridge: "{bridge}", final_output: true}}
""",
        source="p.yaml",
    )


def test_check_locates_a_dotted_bridge_without_running_its_package(
    plugin_host, side_effect_package
):
    resolved = resolve_pipeline(chain("sfx_pkg.bridge:make"), plugin_host, import_code=False)
    assert resolved.stages[1].bridge == UnimportedBridge("sfx_pkg.bridge:make")
    assert not (side_effect_package / "pkg-ran").exists()
    assert not (side_effect_package / "mod-ran").exists()
    # running binds (imports) it, as before
    resolved = resolve_pipeline(chain("sfx_pkg.bridge:make"), plugin_host)
    assert resolved.stages[1].bridge([], None, None) == "x"
    assert (side_effect_package / "mod-ran").exists()


@pytest.mark.parametrize(
    ("bridge", "fragment"),
    [
        ("sfx_pkg.nope:make", "cannot import 'sfx_pkg.nope:make': no module named 'sfx_pkg.nope'"),
        ("sfx_pkg.bridge.deeper:f", "no module named 'sfx_pkg.bridge.deeper'"),
        ("no_such_bridge", "unknown bridge 'no_such_bridge' (registered: "),
        ("sfx pkg:make", "'sfx pkg:make' is not a registered bridge or a dotted path"),
    ],
)
def test_check_reports_an_unlocatable_bridge_naming_stage_and_name(
    plugin_host, side_effect_package, bridge, fragment
):
    with pytest.raises(ConfigError) as err:
        resolve_pipeline(chain(bridge), plugin_host, import_code=False)
    [problem] = err.value.problems
    assert problem.startswith("p.yaml: stage 'b' (id 1): field 'bridge': "), problem
    assert fragment in problem
    assert not (side_effect_package / "pkg-ran").exists()


def test_module_locatable_uses_loaded_modules_and_finders():
    assert module_locatable("omni_core.stage.bridges")
    assert module_locatable("json.decoder")
    assert not module_locatable("json.nope")
    assert not module_locatable("json.decoder.deeper")  # a module is not a package


def one_stage(kind: str, engine_args: str) -> PipelineConfig:
    return PipelineConfig.from_yaml_text(
        f"""
name: x
stages:
  - {{id: 0, name: a, kind: {kind}, final_output: true, engine_args: {engine_args}}}
""",
        source="p.yaml",
    )


def test_check_locates_a_python_stage_callable_without_importing_it(
    plugin_host, side_effect_package
):
    config = one_stage("python", "{callable: 'sfx_pkg.bridge:make'}")
    resolve_pipeline(config, plugin_host, import_code=False)
    assert not (side_effect_package / "pkg-ran").exists()
    assert not (side_effect_package / "mod-ran").exists()
    with pytest.raises(ConfigError, match="stage 'a' .*no module named 'sfx_pkg.nope'"):
        resolve_pipeline(
            one_stage("python", "{callable: 'sfx_pkg.nope:make'}"), plugin_host, import_code=False
        )
    resolve_pipeline(config, plugin_host)  # running imports it, as before
    assert (side_effect_package / "mod-ran").exists()


def test_a_torch_stage_engine_is_located_without_running_its_package(
    plugin_host, side_effect_package
):
    resolve_pipeline(one_stage("torch", "{engine: 'sfx_pkg.bridge:make'}"), plugin_host)
    assert not (side_effect_package / "pkg-ran").exists()
