"""Models registered by plugins (``omni_register_models``): resolve, build aside, check, CLI."""

from __future__ import annotations

import hashlib
import types

import pytest

from omni_core import PLUGIN_API_VERSION, hookimpl
from omni_core.cli import main
from omni_core.errors import ConfigError, PluginConflictError, PluginError
from omni_core.models import (
    MODELS,
    committed_checksums,
    ensure_model,
    model_path,
    resolve_model,
    tree_hashes,
)
from omni_core.plugin.hooks import PluginHost
from omni_core.plugin.types import ModelSpec

CONTENT = {"config.json": b'{"a": 1}\n', "sub/weights.bin": b"\x00\x01\x02"}
SUMS = {k: hashlib.sha256(v).hexdigest() for k, v in CONTENT.items()}


def model_plugin(*specs: ModelSpec) -> types.ModuleType:
    module = types.ModuleType("fake_models")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_models():
        return list(specs)

    module.omni_register_models = omni_register_models
    return module


class Builder:
    """Writes CONTENT (``fail_after`` files, then raises), counting its calls."""

    def __init__(self, content=CONTENT, fail_after: int | None = None) -> None:
        self.calls = 0
        self.content = content
        self.fail_after = fail_after

    def __call__(self, out):
        self.calls += 1
        assert out.is_dir() and not any(out.iterdir()), "builds into an empty directory"
        for i, (rel, data) in enumerate(self.content.items()):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("builder broke")
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)


def test_builtin_demo_models_are_registered_with_committed_checksums(plugin_host):
    specs = plugin_host.models()
    assert set(MODELS) <= set(specs)
    assert {n: plugin_host.model_providers()[n] for n in MODELS} == dict.fromkeys(MODELS, "builtin")
    assert {n: dict(specs[n].checksums) for n in MODELS} == committed_checksums()


def test_plugin_model_resolves_to_its_built_directory_once(
    fake_entry_points, omni_settings, tmp_path
):
    builder = Builder()
    fake_entry_points.add("mine", model_plugin(ModelSpec("my-model", builder, "v3", SUMS)))
    host = PluginHost.create(omni_settings)
    path = resolve_model("my-model", tmp_path, host)
    assert path == str(tmp_path / "models" / "my-model-v3")
    assert tree_hashes(model_path("my-model", tmp_path, "v3")) == SUMS
    assert resolve_model("my-model", tmp_path, host) == path
    assert ensure_model("my-model", tmp_path, host) == model_path("my-model", tmp_path, "v3")
    assert builder.calls == 1
    # anything not registered is a path or hub id, passed through untouched
    assert resolve_model("Org/Some-Model", tmp_path, host) == "Org/Some-Model"
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        ensure_model("nope", tmp_path, host)


def test_failed_build_leaves_neither_target_nor_staging_and_retries_cleanly(
    fake_entry_points, omni_settings, tmp_path
):
    builder = Builder(fail_after=1)
    fake_entry_points.add("mine", model_plugin(ModelSpec("my-model", builder, "v1")))
    host = PluginHost.create(omni_settings)
    with pytest.raises(RuntimeError, match="builder broke"):
        resolve_model("my-model", tmp_path, host)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == []
    # a stale half-built staging directory (a killed build) is replaced, never used
    stale = tmp_path / "models" / "my-model-v1.building"
    stale.mkdir()
    (stale / "junk").write_text("x")
    builder.fail_after = None
    path = resolve_model("my-model", tmp_path, host)
    assert tree_hashes(model_path("my-model", tmp_path, "v1")) == SUMS
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["my-model-v1"]
    assert path.endswith("my-model-v1")


def test_a_model_name_provided_twice_names_both_plugins(fake_entry_points, omni_settings):
    fake_entry_points.add("mine", model_plugin(ModelSpec("tiny-thinker", Builder(), "v1")))
    with pytest.raises(PluginConflictError, match="'tiny-thinker' is provided by two") as info:
        PluginHost.create(omni_settings).models()
    assert "'builtin'" in str(info.value) and "'mine'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "version", "fragment"),
    [("My Model", "v1", "model name 'My Model' is invalid"), ("m", "../x", "version '../x'")],
)
def test_invalid_model_name_or_version_is_a_plugin_error(name, version, fragment):
    with pytest.raises(PluginError, match=fragment):
        ModelSpec(name, Builder(), version)


def test_cli_builds_plugin_models_and_checks_their_checksums(
    fake_entry_points, omni_settings, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("OMNI_CACHE_DIR", str(tmp_path))
    other = dict(CONTENT, **{"config.json": b"changed"})
    fake_entry_points.add(
        "mine",
        model_plugin(
            ModelSpec("good", Builder(), "v1", SUMS, "matches"),
            ModelSpec("drifted", Builder(other), "v1", SUMS),
            ModelSpec("unsummed", Builder(), "v1", None),
        ),
    )
    assert main(["models", "build", "good", "unsummed", "--check"]) == 0
    out = capsys.readouterr().out
    assert f"good: {tmp_path / 'models' / 'good-v1'} (checksums ok)" in out
    assert "unsummed: " in out and "(no committed checksums)" in out
    assert main(["models", "build", "drifted", "--check"]) == 1
    assert "(checksums DIFFER)" in capsys.readouterr().out
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert "good v1 [mine] built - matches" in listing
    assert "tiny-thinker v1 [builtin] " in listing
    assert main(["models", "build", "nosuch"]) == 2
    assert "unknown model(s) ['nosuch']" in capsys.readouterr().err
