"""OpenAI-style error bodies: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import re
from typing import Any

from fastapi.responses import JSONResponse

from omni_core.errors import StageUnavailableError
from omni_core.outputs import ErrorInfo
from omni_core.sampling import VLLM_SAMPLING_EXTRAS, SamplingParams


class ApiError(Exception):
    """A request's error as OpenAI's error body (``status``, ``message``, ``param``, ``code``)."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )
        self.headers = headers

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
        return JSONResponse(body, status_code=self.status, headers=self.headers)


_CLIENT_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_exceeded",
}


# A stage's error names vLLM's field (``SamplingParams``); the request's field is this one.
_REQUEST_FIELD = {vllm: name for name, vllm in VLLM_SAMPLING_EXTRAS.items() if vllm != name}
# The sampling fields a stage's plain ValueError may begin with ("min_tokens must be ..."): vLLM
# raises some of its checks without naming the parameter.
_FIELD_FIRST = re.compile(
    "^({})\\b".format(
        "|".join(
            sorted(
                {*SamplingParams.__struct_fields__, *VLLM_SAMPLING_EXTRAS.values()} - {"extra"},
                key=len,
                reverse=True,
            )
        )
    )
)


def _param(error: ErrorInfo) -> str | None:
    """The request field a stage's 4xx names: its ``param``, else the field its message begins
    with; vLLM's field name as the request spells it."""
    name = error.param
    if name is None and (first := _FIELD_FIRST.match(error.message)) is not None:
        name = first[1]
    return _REQUEST_FIELD.get(name, name) if name is not None else None


def from_error_info(error: ErrorInfo) -> ApiError:
    """A request-scoped engine failure as an HTTP error: a :class:`StageUnavailableError` (a
    replica death included) is 503 ``service_unavailable``, a 4xx is the caller's, else 5xx."""
    if error.is_a(StageUnavailableError):
        return ApiError(503, error.message, "service_unavailable", code=error.type)
    if 400 <= error.status_code < 500:
        kind = _CLIENT_ERROR_TYPES.get(error.status_code, "invalid_request_error")
        param = _param(error)
        return ApiError(error.status_code, error.message, kind, param=param, code=error.type)
    return ApiError(error.status_code, error.message, "server_error", code=error.type)
