"""The Qwen3-Omni talker's batched forwards (:mod:`omni_qwen3.talker`'s engine step).

* :func:`decode_batch`: one decode row of each request of a group in **one talker forward**: their
  KV caches left-padded to the longest into one batch cache, an attention mask hiding the padding,
  each row at its own 3D rope position (``past + rope_delta``, the same on the three axes); each
  request's cache is then its rows of the batch's (the padding cut off again).
* :func:`predict_batch`: the code predictor's residual codes of one frame of each request of a
  group: every request's frame starts a fresh predictor cache with the same 2-row prefill
  ``[talker last hidden, codec_embedding(code0)]`` then one row per group, so the rows line up
  without padding: **one predictor forward per code group** for the whole group.

Sampling stays per request (its own logits processors and seeded generator, drawn in the same
order as alone: the talker's first code, then the residual groups in turn), so a request's codes
are its batch-of-one's up to float rounding; a batch of one runs exactly the unbatched forwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_core.family import batch_cache, take_rows

if TYPE_CHECKING:
    from omni_qwen3.talker import TalkerEngine, _Request


def pick(engine: TalkerEngine, state: _Request, logits: Any) -> int:
    """One code of ``state`` from its (processed) logits row ``[1, vocab]``."""
    torch = engine.torch
    if state.greedy:
        return int(torch.argmax(logits, dim=-1))
    probs = torch.nn.functional.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, num_samples=1, generator=state.generator))


def first_code(engine: TalkerEngine, state: _Request, logits: Any) -> int:
    """The talker's next first code of ``state`` from its raw logits row ``[1, vocab]``."""
    torch = engine.torch
    logits = logits.to(copy=True, dtype=torch.float32)
    history = torch.tensor([state.first], dtype=torch.long).reshape(1, -1)
    for processor in state.processors:
        logits = processor(history, logits)
    return pick(engine, state, logits)


def decode_batch(engine: TalkerEngine, group: list[tuple[_Request, Any]]) -> list[tuple[Any, Any]]:
    """One talker decode step of each ``(state, input row)`` of ``group`` (all past their
    prefill) in one forward; per request its logits row ``[1, vocab]`` (for :func:`first_code`)
    and its last hidden ``[1, 1, hidden]``. A failure leaves every request's cache as it was."""
    torch = engine.torch
    states = [state for state, _ in group]
    inputs = torch.stack([x for _, x in group])[:, None]
    positions = torch.tensor([s.past + s.rope_delta for s in states])
    cache, mask = batch_cache(torch, engine.talker.config.text_config, states)
    engine.forwards["talker"] += 1
    out = engine.talker(
        inputs_embeds=inputs,
        attention_mask=mask,
        position_ids=positions.reshape(1, -1, 1).expand(3, -1, -1),
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=True,
        generation_step=0,  # only echoed back (transformers' trailing-row counter)
    )
    take_rows(states, cache)
    logits = out.logits[:, -1]
    hidden = out.hidden_states[0][-1][:, -1:]
    return [(logits[i : i + 1], hidden[i : i + 1]) for i in range(len(states))]


def predict_batch(
    engine: TalkerEngine, group: list[tuple[_Request, int, Any]]
) -> list[tuple[list[int], Any]]:
    """The code predictor's residual codes of one frame of each ``(state, first code, talker
    hidden)`` of ``group``, and the sum of each frame's code embeddings (the next talker input
    before its text row)."""
    from transformers import DynamicCache

    torch = engine.torch
    predictor = engine.talker.code_predictor
    tables = predictor.get_input_embeddings()
    states = [state for state, _, _ in group]
    codes = torch.tensor([[code] for _, code, _ in group])
    first = engine.talker.get_input_embeddings()(codes)
    hidden = torch.cat([h for _, _, h in group])
    cache = DynamicCache(config=predictor.config)
    samplers = [[] if s.greedy else warpers(1.0, 50, 0.8) for s in states]
    frames = [[code] for _, code, _ in group]
    totals = first[:, 0]
    kwargs: dict[str, Any] = {"inputs_embeds": torch.cat([hidden, first], dim=1)}
    for step in range(engine.groups - 1):
        length = cache.get_seq_length() + (2 if step == 0 else 1)
        engine.forwards["predictor"] += 1
        out = predictor(
            attention_mask=torch.ones((len(states), length), dtype=torch.long),
            past_key_values=cache,
            use_cache=True,
            generation_steps=step,
            **kwargs,
        )
        logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
        residuals = []
        for i, (state, frame) in enumerate(zip(states, frames, strict=True)):
            row = logits[i : i + 1]
            history = torch.tensor([frame[1:]], dtype=torch.long).reshape(1, -1)
            for warper in samplers[i]:
                row = warper(history, row)
            residuals.append(pick(engine, state, row))
            frame.append(residuals[-1])
        ids = torch.tensor([[r] for r in residuals])
        totals = totals + tables[step](ids)[:, 0]
        kwargs = {"input_ids": ids}
    return [(frame, totals[i]) for i, frame in enumerate(frames)]


def warpers(temperature: float, top_k: int | None, top_p: float) -> list[Any]:
    from transformers.generation import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers: list[Any] = []
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k is not None and top_k > 0:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    return warpers
