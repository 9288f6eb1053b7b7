"""The family kit (omni_core.family): the tiny-checkpoint toolkit, registration helpers, audio
options, streaming vocoder windows, and the testing kit's parity harness, on toy inputs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from omni_core import OmniError, RequestError
from omni_core.family import (
    audio_streamed,
    causal_piece,
    causal_stream,
    context_window,
    corpus,
    crossfade,
    exact_context,
    fuse_experts,
    lazy,
    lazy_pipeline,
    load_part,
    padded_render,
    receptive_field,
    require_consistent,
    shrink,
    tiny_model,
    token_ids,
)
from omni_core.testing.parity import (
    GreedyParity,
    ParityError,
    check_bounded,
    check_exact,
    check_ids_or_top_k,
    collect_outputs,
    top_k_oracle,
)


def test_importing_the_kit_imports_no_torch_or_transformers():
    code = (
        "import sys\nimport omni_core.family, omni_core.family.compat\n"
        "from omni_core.family import tiny_model, corpus\n"
        "print([m for m in ('torch', 'transformers', 'vllm') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr


def test_corpus_is_deterministic_per_seed_and_uses_the_words():
    a, b = corpus(["omni", "kit"], seed=7, lines=50), corpus(["omni", "kit"], seed=7, lines=50)
    assert a == b and len(a) == 51
    assert corpus(["omni", "kit"], seed=8, lines=50) != a
    assert "omni" in " ".join(a) and "kit" in " ".join(a)
    with pytest.raises(ValueError, match="words is empty"):
        corpus([], seed=1)


def test_shrink_refuses_an_entry_the_real_config_lacks():
    real = {"hidden_size": 4096, "num_hidden_layers": 32}
    assert shrink(real, hidden_size=64) == {"hidden_size": 64, "num_hidden_layers": 32}
    with pytest.raises(KeyError, match="hiden_size"):
        shrink(real, hiden_size=64)


def test_require_consistent_names_every_failed_check():
    require_consistent("tiny-x", [(True, "fine")])
    with pytest.raises(ValueError, match="tiny-x config inconsistent: a; c"):
        require_consistent("tiny-x", [(False, "a"), (True, "b"), (False, "c")])


def test_token_ids_of_a_config_entry():
    assert token_ids(None) == frozenset() and token_ids(3) == {3} and token_ids([1, 2]) == {1, 2}


def test_lazy_names_what_it_cannot_import():
    assert lazy("json:dumps")([1]) == "[1]"
    for bad in ("json", "json:nope", "no_such_module_x:f"):
        with pytest.raises(OmniError, match="json|no_such_module_x"):
            lazy(bad)


def test_tiny_model_builds_through_the_named_function_only_when_built(tmp_path):
    spec = tiny_model("tiny-kit", "pathlib:Path.mkdir", "v1", description="d")
    assert spec.name == "tiny-kit" and spec.checksums is None and spec.description == "d"
    with pytest.raises(OmniError, match="Path.mkdir"):  # resolved at build time, not before
        spec.build(tmp_path / "m")
    seen = []
    spec = tiny_model("tiny-kit", seen.append, "v2")
    spec.build(tmp_path)
    assert seen == [tmp_path]


def _no_host():
    return "no host"


def _with_host(host=None, model="m"):
    return ("host", host, model)


def test_lazy_pipeline_passes_the_host_only_to_a_factory_asking_for_it():
    this = __name__
    assert lazy_pipeline("p", f"{this}:_no_host").config(host="H") == "no host"  # type: ignore[arg-type]
    assert lazy_pipeline("p", f"{this}:_with_host").config(host="H") == ("host", "H", "m")  # type: ignore[arg-type]
    assert lazy_pipeline("p", f"{this}:_no_host").load() == "no host"  # the old call form


def test_audio_streamed_reads_both_options_and_names_a_bad_one():
    assert audio_streamed({}) is False
    assert audio_streamed({"audio": {"stream": True}}) is True
    assert audio_streamed({"audio_stream": True}) is True
    with pytest.raises(RequestError, match="code2wav: sampling_params.extra.audio_stream"):
        audio_streamed({"audio_stream": "yes"}, stage="code2wav")
    with pytest.raises(RequestError, match="must be an object"):
        audio_streamed({"audio": 1})


UP, HELD, FIELD = 4, 3, 5  # samples per frame, samples held back, receptive field in frames


def toy_vocoder(codes: np.ndarray) -> np.ndarray:
    """A causal vocoder with look-ahead: frame t sums codes[t - FIELD .. t] (within its input);
    sample j voices frame (j + HELD) // UP, so the last HELD samples would need the next frame
    and are held back."""
    frames = codes.shape[-1]
    summed = np.array([codes[max(0, t - FIELD) : t + 1].sum() for t in range(frames)], float)
    j = np.arange(frames * UP - HELD)
    return summed[(j + HELD) // UP] + (j % UP) * 0.01


def test_causal_stream_is_exact_from_the_receptive_field_and_off_below_it():
    codes = np.random.default_rng(0).integers(0, 9, size=23).astype(float)
    whole = toy_vocoder(codes)
    exact = np.concatenate(list(causal_stream(toy_vocoder, codes, 4, FIELD, UP, HELD)))
    assert exact.shape == whole.shape and np.array_equal(exact, whole)
    short = np.concatenate(list(causal_stream(toy_vocoder, codes, 4, 2, UP, HELD)))
    assert short.shape == whole.shape and not np.allclose(short, whole)
    assert check_bounded(exact, whole, 1e-9, off=short, what="toy") == 0.0
    first = causal_piece(toy_vocoder, codes, 0, 4, FIELD, UP, HELD)
    assert np.array_equal(first, toy_vocoder(codes[:4]))
    with pytest.raises(ValueError, match="left_context"):
        next(causal_stream(toy_vocoder, codes, 4, 0, UP, HELD))
    assert exact_context(2, 8) == 14 and exact_context(8, 72, 3) == 571


def test_check_exact_names_the_first_divergence():
    check_exact([1, 2, 3], [1, 2, 3])
    with pytest.raises(ParityError, match="codes: position 1: pipeline 5 != reference 2"):
        check_exact([1, 5, 3], [1, 2, 3], what="codes")
    with pytest.raises(ParityError, match="pipeline has 2, reference 3"):
        check_exact([1, 2], [1, 2, 3])


def test_check_ids_or_top_k_allows_one_near_tie_and_no_more():
    ref = [1, 2, 3, 4]
    assert check_ids_or_top_k(ref, [{1}] * 4, ref, lambda i: {ref[i]}) is None
    tops = [{1}, {7, 2}, {3}, {4}]
    assert check_ids_or_top_k([1, 7, 9], tops[:3], ref, lambda i: {2, 7}) == 1
    with pytest.raises(ParityError, match="reference's 2 is not in the pipeline's top-k"):
        check_ids_or_top_k([1, 7], [{1}, {7}], ref, lambda i: {2, 7})
    with pytest.raises(ParityError, match="pipeline's 7 is not in the reference's top-k"):
        check_ids_or_top_k([1, 7], tops[:2], ref, lambda i: {2})
    with pytest.raises(ParityError, match="the same ids"):
        check_ids_or_top_k(ref[:2], tops[:2], ref, lambda i: {ref[i]})


def test_check_bounded_fails_out_of_bound_and_on_a_vacuous_bound():
    ref = np.zeros(8)
    assert check_bounded(ref + 1e-7, ref, 1e-6) == pytest.approx(1e-7)
    with pytest.raises(ParityError, match="> bound"):
        check_bounded(ref + 1e-3, ref, 1e-6)
    with pytest.raises(ParityError, match="vacuous"):
        check_bounded(ref, ref, 1.0, off=ref + 0.5)  # a wrong output passes a loose bound
    with pytest.raises(ParityError, match="shape"):
        check_bounded(np.zeros(3), ref, 1.0)


class _Out:
    def __init__(self, ids, finished=False, error=None):
        self.token_ids, self.finished, self.error = ids, finished, error


class _Engine:
    def __init__(self, outs):
        self.outs = outs

    async def generate(self, prompt, sampling_params=None):
        for out in self.outs:
            yield out


def test_collect_outputs_returns_every_output_and_refuses_an_unfinished_request():
    outs = [_Out([1]), _Out([2], finished=True)]
    assert collect_outputs(_Engine(outs), "p") == outs
    for bad in ([_Out([1])], [_Out([1], finished=True, error="boom")], []):
        with pytest.raises(ParityError, match="did not finish cleanly"):
            collect_outputs(_Engine(bad), "p")


def test_top_k_oracle_ranks_the_logits_after_the_forced_prefix():
    torch = pytest.importorskip("torch")

    class Logits:
        def __init__(self, logits):
            self.logits = logits

    seen = []

    def forward(input_ids, pixel_values):
        seen.append((input_ids.tolist(), pixel_values))
        logits = torch.zeros(1, input_ids.shape[1], 6)
        logits[0, -1] = torch.tensor([0.0, 5, 1, 4, 2, 3]) + input_ids.shape[1]
        return Logits(logits)

    inputs = {"input_ids": torch.tensor([[7, 8]]), "attention_mask": None, "pixel_values": "px"}
    oracle = top_k_oracle(forward, inputs, 3)
    assert oracle(1, [4, 9, 9]) == [1, 3, 5]
    assert seen == [([[7, 8, 4]], "px")]  # the prompt plus the prefix up to the position


def test_context_window_clips_to_the_frames_known():
    assert context_window(8, 4, 3, 2, 100) == (5, 12, 14)
    assert context_window(0, 4, 3, 2, 100) == (0, 4, 6)
    assert context_window(8, 4, 3, 2, 10) == (5, 10, 10)


def test_crossfade_blends_from_the_tail_to_the_core():
    torch = pytest.importorskip("torch")
    core = torch.ones(1, 1, 6)
    out = crossfade(torch.zeros(1, 1, 4), core)
    assert out is core
    assert out[0, 0].tolist() == pytest.approx([0.125, 0.375, 0.625, 0.875, 1.0, 1.0])


def test_padded_render_equals_the_whole_render_from_the_measured_receptive_field():
    torch = pytest.importorskip("torch")
    conv = torch.nn.Conv1d(3, 2, kernel_size=7, padding=3)  # 3 frames each side, 2 samples each
    torch.nn.init.normal_(conv.weight, generator=torch.Generator().manual_seed(1))

    def vocoder(x):
        return conv(x).transpose(1, 2).reshape(1, -1)  # hop 2: [1, frames * 2]

    pad = receptive_field(vocoder, 3, hop=2, frames=40)
    assert pad == 4  # radius 3 plus the margin
    x = torch.randn(1, 3, 30, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        whole = vocoder(x).reshape(-1)
    piece = padded_render(vocoder, x, 10, 20, pad, 2)
    assert torch.equal(piece, whole[20:40])
    short = padded_render(vocoder, x, 10, 20, 1, 2)
    check_bounded(piece, whole[20:40], 1e-6, off=short, what="padded render")


def test_greedy_parity_compares_prompt_ids_and_greedy_ids():
    torch = pytest.importorskip("torch")

    class Logits:
        def __init__(self, logits):
            self.logits = logits

    def thinker(input_ids):
        return Logits(torch.arange(6.0).repeat(1, input_ids.shape[1], 1))  # top-2: 5, 4

    class Model:
        pass

    model = Model()
    model.thinker = thinker  # type: ignore[attr-defined]

    def greedy(reference, chat, new_tokens, **media):
        return "text", {"input_ids": torch.tensor([[1, 2]])}, [5, 5]

    class Payload:
        prompt_token_ids = [1, 2]

    class Out(_Out):
        def __init__(self, ids, logprobs, finished=False):
            super().__init__(ids, finished)
            self.logprobs, self.payload = logprobs, Payload()

    parity = GreedyParity(greedy, new_tokens=4, k=2)
    ref = parity.reference((None, model), [])
    assert ref["prompt_ids"] == [1, 2] and ref["top"](0, ref["ids"]) == [5, 4]
    ran = parity.run(_Engine([Out([5, 4], [{5: 0}, {4: 0, 5: 0}], finished=True)]), "p")
    parity.check(ran, ref)  # diverges at step 1 within each other's top-2
    Payload.prompt_token_ids = [1, 3]
    with pytest.raises(ParityError, match="prompt ids: position 1"):
        parity.check(ran, ref)


def test_load_part_loads_one_prefix_strictly_and_fuses_per_expert_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors.torch")
    source = torch.nn.Linear(3, 2)
    tensors = {f"part.{k}": v for k, v in source.state_dict().items()}
    tensors["other.weight"] = torch.zeros(1)
    safetensors.save_file(tensors, str(tmp_path / "model.safetensors"))
    loaded = load_part(torch.nn.Linear(3, 2), tmp_path, "part.")
    assert torch.equal(loaded.weight, source.weight) and not loaded.training
    with pytest.raises(OmniError, match="does not fit Linear"):
        load_part(torch.nn.Linear(3, 2, bias=False), tmp_path, "part.")  # an unexpected bias
    with pytest.raises(OmniError, match="no 'nope.\\*' tensors"):
        load_part(torch.nn.Linear(3, 2), tmp_path, "nope.")
    gate, up, down = torch.ones(2, 3), torch.full((2, 3), 2.0), torch.zeros(3, 2)
    fused = fuse_experts(
        {
            f"m.experts.{e}.{p}_proj.weight": w
            for e in (1, 0)
            for p, w in (("gate", gate * (e + 1)), ("up", up), ("down", down))
        }
    )
    assert fused["m.experts.gate_up_proj"].shape == (2, 4, 3)
    assert fused["m.experts.gate_up_proj"][1, 0, 0] == 2.0  # experts in index order
    assert fused["m.experts.down_proj"].shape == (2, 3, 2)
