"""Errors of the duplex plugin (all derive from :class:`omni_core.errors.OmniError`)."""

from __future__ import annotations

from omni_core import OmniError

# error code -> OpenAI Realtime ``error.type``
RATE_LIMIT_CODES = frozenset(
    {"resource_exhausted", "client_session_limit", "input_backpressure", "engine_backpressure"}
)
SERVER_CODES = frozenset(
    {
        "engine_dead",
        "engine_error",
        "internal_error",
        "stage_failed",
        "stage_unavailable",
        "timeout",
    }
)


class DuplexError(OmniError):
    """A session operation failed. ``code`` is machine-readable; ``retryable`` says whether the
    same call may succeed later (capacity, backpressure, timeouts); ``retry_after_s``, where
    known, when it may (a ``Retry-After`` for the Realtime ``error`` event)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        session_id: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.session_id = session_id
        self.retry_after_s = retry_after_s


def error_type(code: str) -> str:
    """The Realtime ``error.type`` of an error code."""
    if code in RATE_LIMIT_CODES:
        return "rate_limit_error"
    if code in SERVER_CODES:
        return "server_error"
    return "invalid_request_error"
