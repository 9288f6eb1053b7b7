"""Shared helpers of the duplex tests: a scripted duplex pipeline, a tone model plug, audio."""

from __future__ import annotations

import asyncio
import math
import struct

from omni_core import hookimpl
from omni_core.config.pipeline import PipelineConfig

import omni_duplex.plugin as duplex_plugin
from omni_duplex import protocol as P
from omni_duplex.config import WIRE_SAMPLE_RATE
from omni_duplex.model import Delta, DuplexModelSpec, TinyOmniModel

SECTION = (
    "{model: test-voice, max_sessions: 4, idle_ttl_s: 30, disconnect_grace_s: 0.3, "
    "cleanup_retry_s: 0.05}"
)

PIPE = """
name: duplex-scripted
engine: duplex
duplex: SECTION
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 6, delay_s: 0.002}, final_output: true, final_output_type: text}
  - {id: 1, name: talker, kind: scripted, inputs: [{stage: 0, mode: stream, chunk: 2}], engine_args: {num_tokens: 2}}
  - {id: 2, name: vocoder, kind: scripted, inputs: [{stage: 1, mode: stream, chunk: 2}], engine_args: {num_tokens: 1}, final_output: true, final_output_type: audio}
"""


def pipeline(
    section: str = SECTION, thinker: str = "{num_tokens: 6, delay_s: 0.002}"
) -> PipelineConfig:
    text = PIPE.replace("SECTION", section).replace("{num_tokens: 6, delay_s: 0.002}", thinker)
    return PipelineConfig.from_yaml_text(text, source="<duplex test pipeline>")


class ToneModel(TinyOmniModel):
    """Like tiny-omni, but the scripted 'vocoder' tokens become 10 ms tones (audio deltas)."""

    name = "test-voice"

    def project(self, output):
        if (
            output.output_type == "audio"
            and output.token_ids
            and output.finish_reason != "cancelled"
        ):
            return [Delta("audio", tone(10 * len(output.token_ids), amp=0.2))]
        return super().project(output)


class VoicePlugin:
    OMNI_PLUGIN_API_VERSION = 2

    @hookimpl
    def omni_duplex_register_models(self):
        return [DuplexModelSpec("test-voice", lambda pipeline, section: ToneModel(), "tones")]


def register(fake_entry_points) -> None:
    fake_entry_points.add("duplex", duplex_plugin, distribution="omni-duplex", version="0.1.0")
    fake_entry_points.add("duplex-test", VoicePlugin(), distribution="duplex-tests")


def tone(ms: int, amp: float = 0.3, freq: float = 220.0, rate: int = WIRE_SAMPLE_RATE) -> bytes:
    n = rate * ms // 1000
    return struct.pack(
        f"<{n}h", *(int(amp * 32767 * math.sin(2 * math.pi * freq * i / rate)) for i in range(n))
    )


def spoken(name: str = "speech_hold_on", rate: int = WIRE_SAMPLE_RATE) -> bytes:
    """One of omni-duplex's speech clips (espeak-ng, about 1 s) as pcm16 at ``rate``: what the
    default (Silero) VAD calls speech, where a tone is not."""
    from omni_duplex.audio import encode_pcm16, resample
    from omni_duplex.vad_eval import CLIP_DIR, RATE, load_speech

    (clip,) = load_speech(CLIP_DIR, f"{name}.wav")
    return encode_pcm16(resample(clip, RATE, rate))


def clip_ms(pcm: bytes, rate: int = WIRE_SAMPLE_RATE) -> int:
    return 1000 * len(pcm) // 2 // rate


def silence(ms: int, rate: int = WIRE_SAMPLE_RATE) -> bytes:
    return b"\x00\x00" * (rate * ms // 1000)


def send_audio(session, pcm: bytes, chunk_ms: int = 20) -> None:
    step = WIRE_SAMPLE_RATE * chunk_ms // 1000 * 2
    for offset in range(0, len(pcm), step):
        session.send(P.AppendAudio(audio=pcm[offset : offset + step]))


async def until(session, predicate, timeout: float = 10.0) -> list[P.DuplexEvent]:
    """Events up to and including the first that satisfies ``predicate``."""
    seen = []
    async with asyncio.timeout(timeout):
        while True:
            event = await session.recv()
            seen.append(event)
            if predicate(event):
                return seen


def of_type(kind: str):
    return lambda e: e.type == kind


async def stage_running(engine) -> list[str]:
    states = await engine.collective_rpc("get_state")
    return sorted(r for s in states for r in s["running"])


class Refusing:
    """The scripted thinker refuses (400, as vLLM past ``max_model_len``) any conversation that
    holds a turn longer than ``limit`` characters: the model plug re-sends the history."""

    def __init__(self, engine, limit: int = 100) -> None:
        import msgspec

        self.plans = []
        model = engine.orchestrator.sessions.model
        plan = model.plan_response

        def refusing_plan(context):
            result = plan(context)
            texts = [h["text"] for h in context.history] + [t.text for t in context.turns]
            self.plans.append(texts)
            if any(len(t) > limit for t in texts):
                fault = {"fail_after": 0, "status": 400, "stages": ["thinker"]}
                first = result.params[0]
                extra = {**first.extra, "scripted": fault}
                result.params[0] = msgspec.structs.replace(first, extra=extra)
            return result

        model.plan_response = refusing_plan
