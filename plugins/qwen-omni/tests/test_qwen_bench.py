"""``omni bench qwen-omni`` is registered by omni-qwen; its pipelines are qwen2.5-omni's with every
stage on a recording copy of its kind (same engine_args model, same renderer), so the bench reads
each replica's compute time through the public client. The run itself is CI's
``omni bench qwen-omni --quick`` (.ci/run), which fails on a failed check."""

from __future__ import annotations

import pytest
from omni_qwen.bench import TIMED, _Recorder, critical_path, timed
from omni_qwen.pipelines import omni_pipeline

from omni_core import OmniSettings, PluginHost
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError


def test_registered_and_the_timed_pipeline_resolves_like_the_original(tmp_path):
    host = PluginHost.create(OmniSettings(cache_dir=tmp_path))
    assert "qwen-omni" in host.benchmarks()
    config = omni_pipeline(edge="on_finish")
    recorder = _Recorder(host, {s.kind for s in config.stages})
    kinds = host.stage_kinds()
    assert kinds[TIMED + "vllm"].config_model is kinds["vllm"].config_model
    assert kinds[TIMED + "vllm"].renderer is kinds["vllm"].renderer  # the thinker renders chats
    resolved = resolve_pipeline(timed(config), host)
    assert [s.config.kind for s in resolved.stages.values()] == [
        "bench-timed-vllm",
        "bench-timed-torch",
        "bench-timed-torch",
    ]
    assert resolved.stages[1].config.inputs[0].mode == "on_finish"
    assert recorder.compute_s() == {} and recorder.clients == []
    bad = omni_pipeline().model_dump(exclude_unset=True)
    bad["stages"][1]["engine_args"]["threads"] = 0
    with pytest.raises(ConfigError, match="threads"):
        resolve_pipeline(timed(type(config).from_dict(bad, source="<bad>")), host)


def test_the_critical_path_overlaps_thinker_and_talker_only_when_streamed():
    compute = {"thinker": 0.2, "talker": 0.5, "token2wav": 0.3}
    assert critical_path("on_finish", compute) == pytest.approx(1.0)
    assert critical_path("stream", compute) == pytest.approx(0.8)
    assert critical_path("stream", {**compute, "thinker": 0.6}) == pytest.approx(0.9)
