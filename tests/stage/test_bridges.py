"""Bridges: the ``audio`` bridge carries a stream of audio chunks into a kind of a plugin's (which
declares the bridge it needs); a payload-only upstream is never skipped silently."""

from __future__ import annotations

import sys
import textwrap
import types
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from omni_core import ConfigError, OmniSettings, PipelineConfig, StageOutput
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import PluginError
from omni_core.extend import AudioChunk, LocalStageClient, StageRequest
from omni_core.plugin import PLUGIN_API_VERSION, PluginHost, StageKind, hookimpl

VOICE = textwrap.dedent("""
    import threading

    import numpy as np
    from omni_core.extend import AudioChunk

    HEARD_FIRST = threading.Event()  # set by the downstream kind when the first chunk arrives
    WAITED: list[bool] = []

    def speak(prompt, params):
        for i in range(3):
            yield AudioChunk(np.full(4 + i, i / 10, dtype=np.float32), 16000)

    def speak_then_wait(prompt, params):
        yield AudioChunk(np.zeros(4, dtype=np.float32), 16000)
        WAITED.append(HEARD_FIRST.wait(20))  # True only if chunk 1 arrived while we wait
        yield AudioChunk(np.zeros(5, dtype=np.float32), 16000)
""")


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Listener(LocalStageClient):
    """Takes audio chunks (its request's prompt, then streamed input): one text output each."""

    def __init__(self, label: str, heard: list[Any]) -> None:
        super().__init__(label)
        self.heard = heard

    def _hear(self, request_id: str, chunks: Any, final: bool) -> None:
        for chunk in chunks:
            self.heard.append(chunk)
            self.emit(
                StageOutput(
                    request_id=request_id, text=f"{len(chunk.samples)}@{chunk.sample_rate} "
                )
            )
        if final:
            self.emit(StageOutput(request_id=request_id, finished=True, finish_reason="stop"))

    async def add_request(self, request: StageRequest) -> None:
        self._hear(request.request_id, request.prompt, not request.streaming_input)

    async def add_input(self, request_id: str, prompt: Any, final: bool) -> None:
        self._hear(request_id, prompt, final)


def listener_plugin(heard: list[Any], seen: list[tuple[str, str | None]], bridge: str | None):
    module = types.ModuleType("omni_listener")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION  # type: ignore[attr-defined]

    def omni_register_stage_kinds():
        return [
            StageKind(
                "listener",
                lambda stage, replica, context: Listener(stage.name, heard),
                NoArgs,
                bridge=bridge,
            )
        ]

    class Observer:  # state on a plugin object, as docs/plugins.md says
        @hookimpl
        def omni_stage_output(self, request, stage_id, output):
            seen.append((request.run_id, stage_id, output.output_type))

    module.omni_register_stage_kinds = hookimpl(omni_register_stage_kinds)  # type: ignore[attr-defined]
    module.omni_pipeline_plugin = hookimpl(lambda pipeline, port: Observer())  # type: ignore[attr-defined]
    return module


@pytest.fixture
def voice(tmp_path):
    (tmp_path / "voice_engine.py").write_text(VOICE)
    sys.path.insert(0, str(tmp_path))
    yield "voice_engine:speak"
    sys.path.remove(str(tmp_path))
    sys.modules.pop("voice_engine", None)


def pipeline(bridge: str = "") -> str:
    return f"""
name: speak-listen
stages:
  - {{id: 0, name: vocoder, kind: python, engine_args: {{callable: "voice_engine:speak"}}}}
  - {{id: 1, name: ears, kind: listener, inputs: [{{stage: 0, mode: stream}}], {bridge}
     final_output: true}}
"""


def host(heard, seen, kind_bridge: str | None) -> PluginHost:
    plugin = listener_plugin(heard, seen, kind_bridge)
    return PluginHost.create(
        OmniSettings(), load_entry_points=False, extra_plugins=[("ears", plugin)]
    )


@pytest.mark.parametrize(("kind_bridge", "stage_bridge"), [("audio", ""), (None, "bridge: audio,")])
async def test_a_stream_edge_carries_each_audio_chunk_into_a_plugin_kind(
    make_engine, voice, kind_bridge, stage_bridge
):
    heard: list[Any] = []
    seen: list[Any] = []
    engine = make_engine(pipeline(stage_bridge), plugins=host(heard, seen, kind_bridge))
    outs = [o async for o in engine.generate("hi", request_id="r")]
    assert [type(c) for c in heard] == [AudioChunk] * 3
    assert [(len(c.samples), float(c.samples[0])) for c in heard] == [
        (4, 0.0),
        (5, pytest.approx(0.1)),
        (6, pytest.approx(0.2)),
    ]
    assert "".join(o.text for o in outs) == "4@16000 5@16000 6@16000 "
    assert outs[-1].finished and outs[-1].error is None
    # a hook tells the vocoder's outputs are audio by their type
    assert [t for _, sid, t in seen if sid == 0] == ["audio", "audio", "audio", None]
    assert [t for _, sid, t in seen if sid == 1][:3] == ["text"] * 3


async def test_the_downstream_kind_hears_each_chunk_as_it_is_yielded(make_engine, voice):
    """The vocoder yields its first chunk, then waits until the downstream kind heard it: with
    the python kind one item late (before), the chunk stayed with the vocoder meanwhile."""
    import voice_engine

    class Hearing(list):
        def append(self, chunk: Any) -> None:
            super().append(chunk)
            voice_engine.HEARD_FIRST.set()

    heard = Hearing()
    text = pipeline("bridge: audio,").replace("voice_engine:speak", "voice_engine:speak_then_wait")
    engine = make_engine(text, plugins=host(heard, [], None))
    outs = [o async for o in engine.generate("hi")]
    assert voice_engine.WAITED == [True]
    assert [len(c.samples) for c in heard] == [4, 5]
    assert outs[-1].finished and outs[-1].error is None


async def test_payload_only_upstream_on_the_default_bridge_fails_naming_the_bridge(
    make_engine, voice
):
    """Before: the default bridge found no tokens or text and the stage was silently skipped
    (the request 'finished' with no output from it)."""
    heard: list[Any] = []
    engine = make_engine(pipeline(), plugins=host(heard, [], None))
    outs = [o async for o in engine.generate("hi", request_id="r")]
    error = outs[-1].error
    assert error is not None and (error.type, error.status_code) == ("ConfigError", 400)
    assert "stage 'vocoder' produced payloads only (AudioChunk)" in error.message
    assert "`bridge: audio`" in error.message
    assert heard == []


def test_a_kind_producing_audio_into_the_default_bridge_is_a_config_error():
    config = PipelineConfig.from_yaml_text(
        """
name: voc
stages:
  - {id: 0, name: talker, kind: scripted, engine_args: {num_tokens: 3}}
  - {id: 1, name: voc, kind: vocoder, inputs: [{stage: 0, mode: stream}]}
  - {id: 2, name: after, kind: scripted, inputs: [1], final_output: true}
""",
        source="voc.yaml",
    )
    with pytest.raises(ConfigError) as info:
        resolve_pipeline(config, PluginHost.create(OmniSettings(), load_entry_points=False))
    assert info.value.problems == [
        "voc.yaml: stage 'after' (id 2): field 'bridge': the default bridge forwards token ids or text, "
        "but input stage 'voc' (kind 'vocoder') produces audio: set `bridge: audio`"
    ]


def test_a_kind_declaring_an_unknown_bridge_is_named(voice):
    heard: list[Any] = []
    plugins = host(heard, [], "nowhere")
    with pytest.raises(
        ConfigError, match=r"unknown bridge 'nowhere'.*stage kind 'listener' needs it"
    ):
        resolve_pipeline(PipelineConfig.from_yaml_text(pipeline(), source="p.yaml"), plugins)


def test_stage_kind_capabilities_are_checked():
    with pytest.raises(PluginError, match="produces"):
        StageKind("k", lambda *a: None, NoArgs, produces=("sound",))
    with pytest.raises(PluginError, match="bridge"):
        StageKind("k", lambda *a: None, NoArgs, bridge="Not A Name")
