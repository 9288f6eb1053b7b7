"""Every error omni-core raises derives from :class:`OmniError`."""

from __future__ import annotations

from collections.abc import Sequence


class OmniError(Exception):
    """Base class of all omni-core errors."""


class ConfigError(OmniError):
    """A pipeline or settings file is invalid. ``problems`` holds one readable line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class PluginError(OmniError):
    """A plugin is broken or misdeclared."""


class PluginLoadError(PluginError):
    """A plugin could not be imported or registered; the message names it."""


class PluginConflictError(PluginError):
    """Two plugins provide the same name (stage kind, bridge, pipeline, ...)."""


class RequestError(OmniError, ValueError):
    """The caller's request is invalid (duplicate id, bad params, unknown stage ...).

    ``param`` names the offending request field where one is known (HTTP puts it in the error
    body's ``param``); ``status_code`` is the HTTP status it maps to (400 unless a more precise
    4xx applies, e.g. 413 for a body over the limit).
    """

    def __init__(self, message: str, *, param: str | None = None, status_code: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status_code = status_code


class RequestRejected(OmniError):
    """An ``omni_admit_request`` hook refuses a request with an HTTP status of its own.

    ``status`` is a 4xx (e.g. 403 not allowed, 422 unprocessable, 429 over a quota); the caller
    gets one error terminal whose ``ErrorInfo`` has that ``status_code`` and ``message`` (HTTP:
    that status, OpenAI's error shape). 429 is retryable. Any other exception from the hook is a
    400 naming the plugin.
    """

    def __init__(self, status: int, message: str) -> None:
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 499:
            raise PluginError(f"RequestRejected needs a 4xx status, got {status!r}")
        super().__init__(message)
        self.status = self.status_code = status
        self.retryable = status == 429


class StageUnavailableError(OmniError):
    """A stage cannot serve a request now: it has no live replica. Retryable (HTTP 503).

    Request-scoped errors reach callers as :class:`~omni_core.outputs.ErrorInfo`; match this one
    (and its subclasses) with ``error.is_a(StageUnavailableError)``, not by its name.
    """

    status_code = 503
    retryable = True


class ReplicaDeadError(StageUnavailableError):
    """The stage replica holding a request died, which ended the request; retry it (another
    replica, or a restarted one, serves it)."""


class StartupError(OmniError):
    """The engine failed to start; the message names the stage that failed."""


class EngineDeadError(OmniError):
    """The engine is shut down or its orchestrator died; no more requests can be served."""


class RpcError(OmniError):
    """A control RPC failed on a stage replica (worker exception, timeout, bad stage id)."""
