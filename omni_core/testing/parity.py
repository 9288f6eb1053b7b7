"""The parity harness of the family kit: a family's pipeline against the reference library
(transformers) on one tiny checkpoint.

* :func:`built_model` (a pytest fixture, :class:`BuiltModels`): ``built_model(NAME)`` builds a
  registered model once per session into a session cache and returns its directory;
* :func:`family_fixtures`: a family conftest's tiny-checkpoint, cache and reference fixtures;
* :func:`rebuild_in_fresh_process` (a tiny checkpoint built again, checked against the committed
  checksums) and :func:`load_reference` (the reference library's processor and model);
* :func:`check_exact`: ids or codes equal, else one error naming the first divergence;
* :func:`check_ids_or_top_k`: greedy ids equal, or at the first divergence each side's token in
  the other's top-k (what two correct float implementations may differ by);
* :func:`pipeline_engine` (a registered pipeline's engine on the session cache),
  :func:`collect_outputs` / :func:`greedy_top_k` (a request's outputs on it) and
  :func:`top_k_oracle` (the reference's top-k at a position): the two sides of a greedy-text
  comparison, which :class:`GreedyParity` puts together;
* :func:`check_bounded`: tensors within a stated tolerance, with a **sensitivity check**: a
  deliberately wrong output (``off``) must fall *outside* the tolerance, proving the bound is not
  vacuous (a tolerance that any output meets tests nothing).

Pure Python apart from :func:`check_bounded`, which reads tensors or arrays through NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "BuiltModels",
    "GreedyParity",
    "ParityError",
    "built_model",
    "check_bounded",
    "check_exact",
    "check_ids_or_top_k",
    "collect_outputs",
    "family_fixtures",
    "greedy_top_k",
    "load_reference",
    "pipeline_engine",
    "rebuild_in_fresh_process",
    "top_k_oracle",
]


class ParityError(AssertionError):
    """The pipeline and the reference differ beyond what the check allows (an
    ``AssertionError``, so pytest reports it as a failed assertion)."""


def check_exact(ours: Sequence[Any], reference: Sequence[Any], what: str = "ids") -> None:
    """``ours == reference`` element by element and in length; else a :class:`ParityError`
    naming the first position that differs."""
    for i, (a, b) in enumerate(zip(ours, reference, strict=False)):
        if a != b:
            raise ParityError(f"{what}: position {i}: pipeline {a!r} != reference {b!r}")
    if len(ours) != len(reference):
        raise ParityError(f"{what}: pipeline has {len(ours)}, reference {len(reference)}")


def check_ids_or_top_k(
    ours: Sequence[int],
    ours_top: Sequence[Container[int]],
    reference: Sequence[int],
    reference_top: Callable[[int], Container[int]],
) -> int | None:
    """Greedy ids equal, or at the first divergence (returned; None without one) the
    reference's token in our top-k there (``ours_top[i]``) and ours in the reference's
    (``reference_top(i)``); after it the continuations may differ. Without a divergence both
    stop at the same place."""
    if len(ours_top) != len(ours):
        raise ParityError(f"{len(ours)} ids but top-k sets for {len(ours_top)} positions")
    for i, (a, b) in enumerate(zip(ours, reference, strict=False)):
        if a == b:
            continue
        if b not in ours_top[i]:
            raise ParityError(f"step {i}: the reference's {b} is not in the pipeline's top-k")
        if a not in reference_top(i):
            raise ParityError(f"step {i}: the pipeline's {a} is not in the reference's top-k")
        return i
    if len(ours) != len(reference):
        raise ParityError(f"the same ids, but {len(ours)} from the pipeline, {len(reference)}")
    return None


def rebuild_in_fresh_process(name: str, cache: Path) -> dict[str, str]:
    """Build the registered model ``name`` again in a fresh process (``omni models build NAME
    --check`` with ``OMNI_CACHE_DIR=cache``), which fails on a file whose SHA-256 differs from
    the committed checksums; returns the SHA-256 of every file it wrote (a family's
    byte-identical-rebuild test compares them with its session build's)."""
    import os
    import subprocess
    import sys

    from omni_core.models import tree_hashes

    cmd = [sys.executable, "-m", "omni_core.cli", "models", "build", name, "--check"]
    env = {**os.environ, "OMNI_CACHE_DIR": str(cache)}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0 or "checksums ok" not in out.stdout:
        raise ParityError(f"omni models build {name} --check failed: {out.stderr[-2000:]}")
    (built,) = (Path(cache) / "models").iterdir()
    return tree_hashes(built)


def load_reference(checkpoint: Path, model_class: Any, processor_class: Any) -> tuple[Any, Any]:
    """The reference library's side of a parity test: ``(processor, model)`` loaded from
    ``checkpoint`` by ``from_pretrained``, the model in float32 and eval mode."""
    import torch

    processor = processor_class.from_pretrained(checkpoint)
    model = model_class.from_pretrained(checkpoint, dtype=torch.float32)
    return processor, model.eval()


def collect_outputs(engine: Any, prompt: Any, sampling_params: Any = None) -> list[Any]:
    """Every output of one request on an async engine (``engine.generate``), in order; the last
    must be finished without an error (else a :class:`ParityError` naming it)."""
    import asyncio

    async def go() -> list[Any]:
        return [out async for out in engine.generate(prompt, sampling_params=sampling_params)]

    outs = asyncio.run(go())
    last = outs[-1] if outs else None
    if last is None or not last.finished or last.error is not None:
        raise ParityError(f"the request did not finish cleanly: {last!r}")
    return outs


def greedy_top_k(
    engine: Any, prompt: Any, stage: str, max_tokens: int, k: int
) -> tuple[list[int], list[set[int]], list[Any]]:
    """One greedy request of up to ``max_tokens`` on ``stage`` asking for ``k`` logprobs per
    step: ``(ids, the top-k id set of each step, every output)`` (:func:`collect_outputs`), the
    pipeline's side of :func:`check_ids_or_top_k`."""
    params = {stage: {"max_tokens": max_tokens, "temperature": 0.0, "logprobs": k}}
    outs = collect_outputs(engine, prompt, params)
    ids = [t for out in outs for t in out.token_ids]
    tops = [set(step) for out in outs for step in out.logprobs or []]
    return ids, tops, outs


@contextmanager
def pipeline_engine(pipeline: str, cache: Path, startup_timeout_s: float = 300.0) -> Iterator[Any]:
    """An :class:`~omni_core.AsyncOmniEngine` of the registered ``pipeline`` with settings whose
    model cache is ``cache`` (:attr:`BuiltModels.cache`), shut down after the ``with``."""
    from omni_core.config.settings import OmniSettings
    from omni_core.engine.async_engine import AsyncOmniEngine
    from omni_core.plugin.hooks import PluginHost

    settings = OmniSettings(cache_dir=cache, startup_timeout_s=startup_timeout_s)
    host = PluginHost.create(settings)
    engine = AsyncOmniEngine(host.pipeline_config(pipeline), settings=settings, plugins=host)
    try:
        yield engine
    finally:
        engine.shutdown()


def top_k_oracle(forward: Callable[..., Any], inputs: Any, k: int) -> Callable[..., list[int]]:
    """The reference's top-``k`` ids at generated position ``i`` after the reference's own
    prefix: ``oracle(i, prefix)`` runs ``forward(input_ids=prompt + prefix[:i], **the rest of
    inputs)`` (a transformers model or sub-model; ``inputs``: its processor's output, batch 1)
    and ranks the last position's logits."""
    import torch

    prompt = inputs["input_ids"][0].tolist()
    rest = {key: v for key, v in inputs.items() if key not in ("input_ids", "attention_mask")}

    def oracle(position: int, prefix: Sequence[int]) -> list[int]:
        forced = torch.tensor([prompt + list(prefix[:position])])
        with torch.no_grad():
            logits = forward(input_ids=forced, **rest).logits[0, -1]
        return list(torch.topk(logits, k).indices.tolist())

    return oracle


class GreedyParity:
    """A greedy-text parity check of one stage (``stage``, also the reference model's sub-model
    of that name) against the reference library: ``greedy(reference, chat, new_tokens, **media)``
    is the family's reference run, returning ``(rendered prompt, processor inputs, ids)``.

    :meth:`reference` runs it and keeps a top-``k`` oracle; :meth:`run` runs a prompt on the
    pipeline's engine; :meth:`check` compares them (:func:`check_ids_or_top_k`) and the prompt
    ids exactly (the multimodal placeholders expanded alike)."""

    def __init__(
        self, greedy: Callable[..., Any], new_tokens: int, k: int, stage: str = "thinker"
    ) -> None:
        self.greedy, self.new_tokens, self.k, self.stage = greedy, new_tokens, k, stage

    def reference(self, reference: Any, chat: Any, **media: Any) -> dict[str, Any]:
        """``{"text", "prompt_ids", "ids", "top"}`` of the reference (``(processor, model)``)."""
        text, inputs, ids = self.greedy(reference, chat, self.new_tokens, **media)
        top = top_k_oracle(getattr(reference[1], self.stage), inputs, self.k)
        prompt_ids = inputs["input_ids"][0].tolist()
        return {"text": text, "prompt_ids": prompt_ids, "ids": ids, "top": top}

    def run(self, engine: Any, prompt: Any) -> tuple[list[int], list[set[int]], list[Any]]:
        """The pipeline's greedy ids, top-k sets and outputs (:func:`greedy_top_k`)."""
        return greedy_top_k(engine, prompt, self.stage, self.new_tokens, self.k)

    def check(self, ran: tuple[list[int], list[set[int]], list[Any]], ref: dict[str, Any]) -> None:
        """The pipeline's run against :meth:`reference`: the same prompt ids, then greedy ids
        equal or within each other's top-k at the first divergence."""
        ids, tops, outs = ran
        check_exact(list(outs[-1].payload.prompt_token_ids), ref["prompt_ids"], "prompt ids")
        if not 0 < len(ids) <= self.new_tokens:
            raise ParityError(f"{len(ids)} ids, not 1..{self.new_tokens}")
        check_ids_or_top_k(ids, tops, ref["ids"], lambda i: ref["top"](i, ref["ids"]))


def check_bounded(
    ours: Any, reference: Any, bound: float, *, off: Any = None, what: str = "tensor"
) -> float:
    """The largest absolute difference of ``ours`` and ``reference`` (same shape), which must
    be <= ``bound``; returned. ``off``: an output that is wrong on purpose (a perturbed input, a
    context below the receptive field...), whose difference from ``reference`` must exceed
    ``bound``, else the bound is vacuous and this is a :class:`ParityError` too."""
    import numpy as np

    a, b = _array(ours), _array(reference)
    if a.shape != b.shape:
        raise ParityError(f"{what}: pipeline shape {a.shape} != reference shape {b.shape}")
    error = float(np.max(np.abs(a - b))) if a.size else 0.0
    if not error <= bound:
        raise ParityError(f"{what}: max |pipeline - reference| = {error:.3g} > bound {bound:.3g}")
    if off is not None:
        c = _array(off)
        wrong = float(np.max(np.abs(c - b))) if c.shape == b.shape and c.size else float("inf")
        if not wrong > bound:
            raise ParityError(
                f"{what}: the bound {bound:.3g} is vacuous: a wrong output is within it "
                f"({wrong:.3g})"
            )
    return error


def _array(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().to("cpu").double().numpy()
    return np.asarray(value, dtype=np.float64)


class BuiltModels:
    """What :func:`built_model` gives: ``built_model(NAME)`` is the directory of the model
    ``NAME`` the installed plugins register, built on first use; ``built_model.cache`` is the
    cache directory holding it (an engine given ``cache_dir=built_model.cache`` finds it)."""

    def __init__(self, cache: Path) -> None:
        from omni_core.config.settings import OmniSettings
        from omni_core.plugin.hooks import PluginHost

        self.cache = cache
        self._host = PluginHost.create(OmniSettings(cache_dir=cache))
        self._built: dict[str, Path] = {}

    def __call__(self, name: str) -> Path:
        from omni_core.models import ensure_model

        if name not in self._built:
            self._built[name] = ensure_model(name, self.cache, self._host)
        return self._built[name]


@pytest.fixture(scope="session")
def built_model(tmp_path_factory: pytest.TempPathFactory) -> BuiltModels:
    """``built_model(NAME)``: the directory of the model ``NAME`` the installed plugins register
    (a family's tiny checkpoint), built once per test session into a session cache
    (``built_model.cache``)."""
    return BuiltModels(tmp_path_factory.mktemp("omni-cache"))


def family_fixtures(
    model: str, reference_model: str, reference_processor: str, names: tuple[str, str, str]
) -> tuple[Any, Any, Any]:
    """A family conftest's three session fixtures, named ``names``: the built tiny checkpoint
    ``model`` (``built_model(model)``), the cache holding it (``built_model.cache``) and the
    reference ``(processor, model)`` on it (:func:`load_reference` of ``"module:Class"`` names,
    imported when first used)::

        tiny_x, x_cache, hf_x = family_fixtures(
            "tiny-x", "transformers:XForConditionalGeneration", "transformers:XProcessor",
            names=("tiny_x", "x_cache", "hf_x"),
        )
    """
    from omni_core.family.registration import lazy

    tiny_name, cache_name, reference_name = names

    @pytest.fixture(scope="session", name=tiny_name)
    def tiny(built_model: BuiltModels) -> Path:
        return built_model(model)

    @pytest.fixture(scope="session", name=cache_name)
    def cache(built_model: BuiltModels) -> Path:
        return built_model.cache

    def reference(request: pytest.FixtureRequest) -> tuple[Any, Any]:
        checkpoint = request.getfixturevalue(tiny_name)
        return load_reference(checkpoint, lazy(reference_model), lazy(reference_processor))

    return tiny, cache, pytest.fixture(scope="session", name=reference_name)(reference)
