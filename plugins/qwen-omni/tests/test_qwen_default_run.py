"""``omni run`` with no PIPELINE runs ``qwen2.5-omni`` when omni-qwen is installed (it marks the
pipeline ``default``); without it (disabled) the core's tiny-omni; two pipelines marked default
are one error naming both. The run itself is CI's main job (``omni run`` in .ci/run)."""

from __future__ import annotations

import types

import pytest

from omni_core import OmniSettings, PluginHost, hookimpl
from omni_core.cli.run import CORE_DEFAULT, default_pipeline
from omni_core.errors import ConfigError
from omni_core.plugin import PLUGIN_API_VERSION
from omni_core.plugin.types import PipelineSpec


def test_omni_qwen_makes_qwen25_omni_the_default(tmp_path):
    host = PluginHost.create(OmniSettings(cache_dir=tmp_path))
    assert default_pipeline(host) == "qwen2.5-omni"
    assert host.pipelines()["qwen2.5-omni"].default
    assert not host.pipelines()["qwen2.5-omni-thinker"].default
    off = PluginHost.create(OmniSettings(cache_dir=tmp_path, disable_plugins=["qwen"]))
    assert "qwen2.5-omni" not in off.pipelines() and default_pipeline(off) == CORE_DEFAULT
    assert CORE_DEFAULT == "tiny-omni" and CORE_DEFAULT in off.pipelines()


def test_two_defaults_are_an_error_naming_both(tmp_path):
    other = types.ModuleType("other_default")
    other.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_register_pipelines():
        return [PipelineSpec("mine", lambda: None, "x", default=True)]

    other.omni_register_pipelines = omni_register_pipelines
    host = PluginHost.create(OmniSettings(cache_dir=tmp_path))
    host.register(other, "other")
    with pytest.raises(ConfigError, match=r"pipelines mine, qwen2\.5-omni are each marked default"):
        default_pipeline(host)
