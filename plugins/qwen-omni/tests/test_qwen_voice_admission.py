"""An unknown voice on ``qwen2.5-omni`` is refused at admission (omni-qwen's
``omni_admit_request``): a streamed chat gets a 400 naming the voice and the checkpoint's
speakers before any 200 or event, and the server keeps answering; ``omni run --voice`` exits 2
before any model builds (omni-qwen's ``omni_pipeline_voices``). The speakers are read from
``spk_dict.pt``'s pickle (no tensor loaded)."""

from __future__ import annotations

import pickle
from pathlib import Path

import httpx
import pytest
from omni_qwen.pipelines import omni_pipeline
from omni_qwen.voices import checkpoint_voices, speaker_names

from omni_core import OmniSettings
from omni_core.cli import main
from omni_core.kinds.torch_kind import stage_model
from omni_core.testing.server import running_server

CHAT = [{"role": "user", "content": "Hello"}]
MESSAGE = "unknown voice 'Nobody' (stage 'talker'): this model has Chelsie, Ethan"


def test_the_speakers_are_read_from_the_pickle_alone(tiny_qwen, tmp_path):
    import torch

    assert checkpoint_voices(str(tiny_qwen)) == ("Chelsie", "Ethan")
    assert set(torch.load(tiny_qwen / "spk_dict.pt", weights_only=True)) == {"Chelsie", "Ethan"}
    assert checkpoint_voices(str(tmp_path)) is None  # no spk_dict.pt: the stages decide
    bad = tmp_path / "spk_dict.pt"
    torch.save({"Zed": torch.zeros(1), "Amy": {"cond": torch.ones(2)}}, bad)
    assert speaker_names(str(bad)) == ("Amy", "Zed")
    evil = tmp_path / "evil" / "spk_dict.pt"
    evil.parent.mkdir()
    torch.save({"x": Path("/")}, evil)  # a class outside torch: refused, never resolved
    with pytest.raises(pickle.UnpicklingError, match="pathlib"):
        speaker_names(str(evil))


@pytest.fixture(scope="module")
def server(tiny_qwen, qwen_cache):
    settings = OmniSettings(cache_dir=qwen_cache, startup_timeout_s=300.0, shutdown_timeout_s=5)
    with running_server(omni_pipeline(), settings=settings, entry_points=True) as running:
        yield running


def chat(base: str, voice: str, stream: bool) -> httpx.Response:
    body = {
        "model": "qwen2.5-omni",
        "messages": CHAT,
        "modalities": ["text", "audio"],
        "audio": {"voice": voice, "format": "wav"},
        "max_tokens": 2,
        "stream": stream,
    }
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)


def test_an_unknown_voice_is_a_400_before_the_stream(server, tiny_qwen):
    base, engine, _ = server
    talker = next(s for s in engine.pipeline.config.stages if s.name == "talker")
    assert stage_model(talker) == str(tiny_qwen)  # the checkpoint the talker's replica loads
    for stream in (True, False):
        r = chat(base, "Nobody", stream)
        assert r.status_code == 400 and "text/event-stream" not in r.headers["content-type"]
        error = r.json()["error"]
        assert error["message"] == MESSAGE and error["type"] == "invalid_request_error"
    r = chat(base, "Ethan", stream=True)  # the server still answers, in a voice it has
    assert r.status_code == 200
    events = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and '"error"' not in r.text
    assert any('"audio"' in e for e in events)


def test_omni_run_refuses_an_unknown_voice_before_any_model_builds_or_loads(
    monkeypatch, capsys, tmp_path
):
    """omni-qwen declares the voices (``omni_pipeline_voices``: the tiny builder's speakers), so
    ``omni run`` refuses before building or loading anything: the fresh cache stays empty (it
    took a model build and a ~52 s engine start before)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("OMNI_CACHE_DIR", str(cache))
    out = tmp_path / "out"
    code = main(["run", "qwen2.5-omni", "--voice", "Nobody", "--max-tokens", "2", "-o", str(out)])
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: --voice Nobody: pipeline 'qwen2.5-omni' has no voice 'Nobody' (its voices: "
        "Chelsie, Ethan)"
    )
    assert not (cache.exists() and any(cache.iterdir())) and not out.exists()


def test_the_declared_voices_come_from_the_builder_or_the_checkpoint(tiny_qwen, tmp_path):
    from omni_qwen.voices import declared_voices

    from omni_core import PipelineConfig

    def pipeline(model: str, engine: str = "omni_qwen.token2wav:build") -> PipelineConfig:
        stage = {
            "id": 0,
            "name": "speak",
            "kind": "torch",
            "final_output": True,
            "final_output_type": "audio",
            "engine_args": {"engine": engine, "model": model},
        }
        return PipelineConfig.from_dict({"name": "p", "stages": [stage]})

    assert declared_voices(omni_pipeline()) == ("Chelsie", "Ethan")  # the tiny model, unbuilt
    assert declared_voices(pipeline(str(tiny_qwen))) == ("Chelsie", "Ethan")  # spk_dict.pt
    assert declared_voices(pipeline(str(tmp_path))) is None  # nothing to read: stages decide
    assert declared_voices(pipeline(str(tiny_qwen), engine="other:build")) is None


def test_omni_qwen_takes_part_where_its_engines_run_on_the_torch_kind(tmp_path):
    """No bridge of omni-qwen and no requires_plugins: its engine on the core's torch kind is
    enough for the voice check to run (omni_applies_to); a pipeline without it leaves it out."""
    from omni_core import OmniSettings, PipelineConfig, PluginHost
    from omni_core.config.resolve import resolve_pipeline

    host = PluginHost.create(OmniSettings(cache_dir=tmp_path))

    def active(stage: dict) -> dict[str, str]:
        config = PipelineConfig.from_dict({"name": "p", "stages": [stage]})
        return host.for_pipeline(resolve_pipeline(config, host)).active

    voiced = {
        "id": 0,
        "name": "speak",
        "kind": "torch",
        "engine_args": {"engine": "omni_qwen.token2wav:build", "model": str(tmp_path)},
        "final_output": True,
        "final_output_type": "audio",
    }
    assert "omni_applies_to" in active(voiced)["qwen"]
    other = {"id": 0, "name": "s", "kind": "scripted", "final_output": True}
    assert "qwen" not in active(other)
