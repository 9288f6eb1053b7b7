"""omni_core.models.tiny: the building blocks a plugin's tiny-model builder uses."""

from __future__ import annotations

import json

import pytest

from omni_core.models.tiny import packaged_checksums, train_qwen2_bpe

pytest.importorskip("tokenizers")

CORPUS = [f"the {w} cat's {i} dogs sat, quietly." for i, w in enumerate("red green blue".split())]


def test_training_is_deterministic_and_round_trips_text():
    first, second = train_qwen2_bpe(CORPUS * 20, 300), train_qwen2_bpe(CORPUS * 20, 300)
    assert first.to_str() == second.to_str()  # same corpus, same size: the same tokenizer file
    assert 256 < first.get_vocab_size() <= 300  # the byte alphabet plus learned merges
    text = "Unseen words, 42 digits & symbols: ünïcode\n"
    ids = first.encode(text).ids
    assert first.decode(ids) == text  # byte-level: nothing is unknown
    assert first.encode("12").ids == [first.token_to_id("1"), first.token_to_id("2")]  # digits


def test_packaged_checksums_reads_the_package_file_and_refuses_other_shapes(tmp_path, monkeypatch):
    package = tmp_path / "tinypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "checksums.json").write_text(json.dumps({"config.json": "ab" * 32}))
    (package / "nested.json").write_text(json.dumps({"model": {"config.json": "ab"}}))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert packaged_checksums("tinypkg") == {"config.json": "ab" * 32}
    with pytest.raises(ValueError, match="tinypkg/nested.json"):
        packaged_checksums("tinypkg", "nested.json")
