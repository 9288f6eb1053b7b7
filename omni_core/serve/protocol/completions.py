"""``POST /v1/completions``'s body: one prompt or several (strings or token ids), echo and
prompt logprobs over the shared sampling fields."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from omni_core.serve.errors import ApiError
from omni_core.serve.protocol.base import _Sampling


class CompletionRequest(_Sampling):
    """``prompt``: a string, token ids, or several of either (a list of strings / of token-id
    lists): a run per prompt, choice ``i * n + j`` for prompt ``i``'s sample ``j`` (vLLM's)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's and vLLM's default here
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    add_special_tokens: bool = True

    @model_validator(mode="after")
    def _grammar_size(self) -> CompletionRequest:
        self.check_grammar_size()
        return self

    @field_validator("prompt", mode="before")
    @classmethod
    def _not_empty(cls, prompt: Any) -> Any:
        """No empty prompt; a list is all strings, all token ids or all token-id lists, as its
        first element says: a 400 naming the first element that is not (pydantic's union
        would name ``prompt[0]`` of some other member)."""
        if prompt in ("", []):
            raise ApiError(400, "'prompt' must not be empty", param="prompt")
        if not isinstance(prompt, list):
            return prompt
        if isinstance(prompt[0], str | list):
            for i, one in enumerate(prompt):
                if one in ("", []):
                    raise ApiError(400, f"'prompt[{i}]' must not be empty", param="prompt")
                if isinstance(one, list) and isinstance(prompt[0], list):
                    _token_ids(one, f"prompt[{i}]")
                elif not isinstance(one, type(prompt[0])):
                    what = "a string" if isinstance(prompt[0], str) else "a list of token ids"
                    raise ApiError(
                        400,
                        f"'prompt[{i}]': expected {what}, as 'prompt[0]' is (a list of prompts "
                        f"holds strings or token-id lists, not both; got {type(one).__name__})",
                        param="prompt",
                    )
        else:
            _token_ids(prompt, "prompt")
        return prompt

    def prompts(self) -> list[str | list[int]]:
        """The request's prompts (one or several)."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            return list(prompt)
        return [prompt]  # type: ignore[list-item]

    def num_logprobs(self) -> int | None:
        return self.logprobs


def _token_ids(ids: list[Any], where: str) -> None:
    for j, token in enumerate(ids):
        if not isinstance(token, int) or isinstance(token, bool):
            raise ApiError(
                400,
                f"'{where}[{j}]': expected a token id (an integer), got {type(token).__name__}",
                param="prompt",
            )
