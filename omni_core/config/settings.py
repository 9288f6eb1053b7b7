"""Process-wide settings from the environment (prefix ``OMNI_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class OmniSettings(BaseSettings):
    """``OMNI_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point name before they are imported."""

    model_config = SettingsConfigDict(env_prefix="OMNI_", extra="ignore")

    disable_plugins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    log_level: str = "WARNING"
    trace_hooks: bool = Field(
        default=False, description="write pluggy's trace of every hook call to stderr"
    )
    startup_timeout_s: float = 120.0
    shutdown_timeout_s: float = 10.0
    request_queue_size: int = Field(default=1024, ge=1)
    rpc_timeout_s: float = 60.0
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    api_key_file: Path | None = Field(
        default=None, description="file whose first line is the API key (keeps it out of ps)"
    )
    public_metrics: bool = Field(
        default=False, description="serve /metrics and /openapi.json without the API key"
    )
    max_body_bytes: int = Field(
        default=16 << 20, ge=1024, description="largest HTTP request body; past it: 413"
    )
    max_json_depth: int = Field(
        default=32, ge=4, description="deepest nesting of a JSON request body; past it: 400"
    )
    max_inflight: int = Field(default=64, ge=1, description="server admission bound")
    max_prompt_chars: int = Field(
        default=4 << 20,
        ge=1,
        description="most characters of prompt text one HTTP request may carry (a chat's "
        "messages together, or a completion's prompt), counted before tokenization; past it: 400",
    )
    read_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="time an HTTP client gets to send a request's headers (from its first byte) "
        "and then its whole body; past it: 408 and the connection is closed",
    )
    write_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="time an HTTP client gets to take each piece of a response (an SSE event "
        "included); a client that stops reading for longer is disconnected and its request "
        "aborted, which frees its in-flight slot",
    )
    grace_s: float = Field(default=10.0, ge=0, description="SIGTERM drain time for in-flight")
    metrics_port: int | None = None
    uvloop: bool = Field(default=False, description="run the orchestrator loop on uvloop")
    loop_lag_warn_s: float = Field(
        default=0.1,
        ge=0,
        description="log a WARNING naming the stage whose code blocks the orchestrator loop for "
        "longer than this (0: no watchdog)",
    )
    gc_threshold: int | None = Field(
        default=None,
        ge=1,
        description="process-wide generation-0 threshold of the garbage collector, set when an "
        "engine starts (Python's default 700 makes full collections rescan every in-flight "
        "request's state many times a second under load; 50000 is a good serving value)",
    )
    max_n: int = Field(
        default=16,
        ge=1,
        description="largest n (parallel samples) one request may ask for; above it the request "
        "is rejected (400)",
    )
    max_audio_seconds: float = Field(
        default=600.0,
        gt=0,
        description="longest audio content part, from its WAV header before decoding; past it: 413",
    )
    max_audio_bytes: int = Field(
        default=128 << 20,
        ge=1 << 20,
        description="largest decoded (float32) audio part, before and after resampling; past "
        "it: 413",
    )
    max_image_pixels: int = Field(
        default=1 << 24,
        ge=1 << 16,
        le=1 << 27,
        description="most pixels an image content part may declare in its header (checked "
        "before decoding); past it: 413",
    )
    max_media_file_bytes: int = Field(
        default=32 << 20,
        ge=1024,
        description="largest file omni run reads for --audio / --image; past it: exit 2",
    )
    fault_injection: bool = Field(
        default=False,
        description="testing only: stage processes fail one request on purpose when its "
        "sampling params' extra carries 'omni_fault' ('add' or 'step')",
    )
    testing_kit: bool = Field(
        default=False,
        description="testing only: plugin managers also register the testing kit's plugin (the "
        "`scripted` stage kind, the `scripted-chain` pipeline); its pytest plugin sets it",
    )
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "omni-core")

    @field_validator("disable_plugins", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value
