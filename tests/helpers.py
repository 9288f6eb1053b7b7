"""Small helpers shared by the tests (expected scripted outputs, collecting streams)."""

from __future__ import annotations

from typing import Any

from omni_core.testing import prompt_tokens, scripted_token


def expected_tokens(stage: str, chunk: list[int], n: int) -> list[int]:
    return [scripted_token(stage, chunk, i) for i in range(n)]


def chain(prompt: Any, *stages: tuple[str, int]) -> list[list[int]]:
    """Token lists each stage of a scripted chain produces for ``prompt``."""
    out = []
    tokens = prompt_tokens(prompt)
    for name, n in stages:
        tokens = expected_tokens(name, tokens, n)
        out.append(tokens)
    return out


async def collect(engine: Any, prompt: Any, **kwargs: Any) -> list[Any]:
    return [o async for o in engine.generate(prompt, **kwargs)]


def by_stage(outputs: list[Any]) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    for out in outputs:
        tokens.setdefault(out.stage_name, []).extend(out.token_ids)
    return tokens


CHAIN = """
name: scripted-chain
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 4, delay_s: 0.001}, final_output: true, final_output_type: text}
  - {id: 1, name: talker, kind: scripted, inputs: [0], engine_args: {num_tokens: 6}}
  - {id: 2, name: vocoder, kind: scripted, inputs: [1], engine_args: {num_tokens: 3}, final_output: true, final_output_type: audio}
"""
