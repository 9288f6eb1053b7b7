"""Configuration: the pipeline's ``duplex:`` section (server-owned) and a session's config
(client-owned, changed by ``session.update``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from omni_duplex.errors import DuplexError

WIRE_SAMPLE_RATE = 24_000  # pcm16 on the Realtime wire


class TurnDetection(BaseModel):
    """Server VAD. ``vad``: ``silero`` (a trained speech detector; noise and music do not count)
    or ``energy`` (any loud sound counts); ``None``: the pipeline's ``duplex.vad`` (filled in
    when the session is opened or updated). ``threshold``: for ``silero`` the speech probability
    a 32 ms window must reach (default 0.5), for ``energy`` the RMS level (float samples in
    [-1, 1]) a 20 ms frame must reach (default 0.02); ``None``: the VAD's default."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad"] = "server_vad"
    vad: Literal["silero", "energy"] | None = None
    threshold: float | None = Field(default=None, gt=0.0, le=1.0)
    prefix_padding_ms: int = Field(default=300, ge=0, le=5000)
    silence_duration_ms: int = Field(default=500, ge=20, le=10_000)
    min_speech_duration_ms: int = Field(default=100, ge=20, le=5000)
    create_response: bool = True
    interrupt_response: bool = True


class SessionConfig(BaseModel):
    """What a client may set. ``turn_detection=None``: the client commits turns itself."""

    model_config = ConfigDict(extra="forbid")

    instructions: str = ""
    output_modalities: list[Literal["text", "audio"]] = Field(
        default_factory=lambda: ["audio"]  # type: ignore[arg-type]
    )
    turn_detection: TurnDetection | None = Field(default_factory=TurnDetection)
    input_sample_rate_hz: int = Field(default=WIRE_SAMPLE_RATE, ge=8000, le=96_000)
    max_output_tokens: int | None = Field(default=None, ge=1)
    # one of the model plug's ``voices`` (checked by omni_duplex.session_shape); None: its default
    voice: str | None = Field(default=None, min_length=1)
    # Realtime function tools and tool_choice, checked by omni_duplex.tools.check_config
    tools: list[Any] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def updated(self, changes: dict[str, Any]) -> SessionConfig:
        """A new config with ``changes`` applied (``turn_detection`` fields merge)."""
        data = self.model_dump()
        for key, value in changes.items():
            if key == "turn_detection" and isinstance(value, dict) and data.get(key) is not None:
                old = data[key]
                if value.get("vad", old["vad"]) != old["vad"] and "threshold" not in value:
                    old = {**old, "threshold": None}  # a threshold means something else there
                data[key] = {**old, **value}
            else:
                data[key] = value
        return parse_session_config(data)


def parse_session_config(data: dict[str, Any] | None) -> SessionConfig:
    from omni_duplex.tools import check_config

    try:
        config = SessionConfig.model_validate(data or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'session'}: {err['msg']}"
            for err in exc.errors()
        )
        raise DuplexError("invalid_session_config", problems) from None
    if config.tools or config.tool_choice != "auto":
        check_config(config)
    return config


class DuplexSection(BaseModel):
    """The pipeline's ``duplex:`` section: the model plug, the default server VAD and
    server-side limits."""

    model_config = ConfigDict(extra="forbid")

    model: str = "tiny-omni"
    vad: Literal["silero", "energy"] = "silero"  # sessions' server VAD unless they choose one
    max_sessions: int = Field(default=16, ge=1)
    # sessions one client (peer address) may hold, detached ones included; None: no cap
    max_sessions_per_client: int | None = Field(default=4, ge=1)
    max_pending_input_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_pending_turns: int = Field(default=4, ge=1)
    # the conversation kept for the model: past the limits the oldest items are dropped
    max_history_turns: int = Field(default=64, ge=1)
    max_history_bytes: int = Field(default=256 * 1024, ge=1024)
    # one client event on /v1/realtime (a larger frame gets an `error` event; the socket stays)
    max_event_bytes: int = Field(default=12 * 1024 * 1024, ge=1024)
    idle_ttl_s: float | None = Field(default=300.0, gt=0)
    disconnect_grace_s: float = Field(default=30.0, ge=0)
    cleanup_retry_s: float = Field(default=1.0, gt=0)
    detached_event_buffer: int = Field(default=1000, ge=0)
    session_defaults: dict[str, Any] = Field(default_factory=dict)
