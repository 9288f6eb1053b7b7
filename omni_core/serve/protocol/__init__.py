"""Request bodies of the OpenAI routes, parsed in one place (pydantic, unknown fields rejected).

``parse_body`` (:mod:`omni_core.serve.bodies`) turns the raw body into a request model or one
:class:`ApiError` (400) naming the field. Each request maps its sampling fields onto the first
stage's :class:`~omni_core.sampling.SamplingParams` (vLLM's semantics; validated there).

One module per resource, as the routers (:mod:`omni_core.serve.routes`): :mod:`.base` (the body
base and the sampling fields both text routes share), :mod:`.chat`, :mod:`.completions`,
:mod:`.images`. A new resource's body (speech, videos) goes in a module of its own here, exported
below.
"""

from omni_core.serve.protocol.base import (
    IGNORED,
    TRANSFER_XARGS,
    UNSUPPORTED,
    JsonSchemaFormat,
    ResponseFormat,
    StreamOptions,
    _Body,
    _Sampling,
)
from omni_core.serve.protocol.chat import (
    MAX_STAGE_TOKENS,
    AudioOptions,
    ChatCompletionRequest,
    StageSampling,
)
from omni_core.serve.protocol.completions import CompletionRequest
from omni_core.serve.protocol.images import ImageEditRequest, ImageRequest

__all__ = [
    "IGNORED",
    "MAX_STAGE_TOKENS",
    "TRANSFER_XARGS",
    "UNSUPPORTED",
    "AudioOptions",
    "ChatCompletionRequest",
    "CompletionRequest",
    "ImageEditRequest",
    "ImageRequest",
    "JsonSchemaFormat",
    "ResponseFormat",
    "StageSampling",
    "StreamOptions",
    "_Body",
    "_Sampling",
]
