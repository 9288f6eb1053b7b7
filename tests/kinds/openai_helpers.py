"""Shared by the OpenAI tests of this folder: the served model's name, its one-stage pipeline (the
tiny thinker on vLLM with the ``hermes`` tool-call parser, built by ``omni bench serve``'s
:func:`~omni_core.bench.serve.thinker_pipe`) and an ``openai`` client on ``omni serve``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import openai

from omni_core.bench.serve import MODEL, thinker_pipe
from tests.serve.conftest import running_server

PIPE = thinker_pipe(MODEL, max_model_len=512, tool_call_parser="hermes")


def client_of(base: str, timeout: float = 120) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=timeout)


@contextmanager
def omni_client(timeout: float) -> Iterator[openai.OpenAI]:
    """A client on ``omni serve`` running :data:`PIPE`, stopped afterwards."""
    with running_server(PIPE) as (base, _, _):
        yield client_of(base, timeout)


__all__ = ["MODEL", "PIPE", "client_of", "omni_client"]
