"""An unknown voice is refused when the request is admitted, before anything streams.

The talker and token2wav stages refuse a voice their checkpoint's ``spk_dict.pt`` lacks, but
they see it only once the thinker's first output reached them: a streamed chat would already be a
200 ending in an error event. :func:`check_voices` (omni-qwen's ``omni_admit_request``) names the
voice and the available ones first, a 400. The speakers are read once per checkpoint (cached)
from ``spk_dict.pt``'s pickle, its names only: no tensor is loaded and torch is not imported on
the orchestrator thread.
"""

from __future__ import annotations

import functools
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omni_core import RequestRejected
from omni_core.extend import stage_model
from omni_qwen.plugin import TINY_MODEL

# the engines whose stages take params.extra["voice"] (torch kind's engine_args.engine)
VOICED_ENGINES = ("omni_qwen.talker:build", "omni_qwen.token2wav:build")


def voiced(pipeline: Any) -> bool:
    """Whether a stage of ``pipeline`` (a PipelineConfig) runs omni-qwen's talker or token2wav."""
    return any(
        stage.kind == "torch" and stage.engine_args.get("engine") in VOICED_ENGINES
        for stage in pipeline.stages
    )


def check_voices(pipeline: Any, params: Mapping[int, Any]) -> None:
    """Raise :class:`RequestRejected` (400) when a request's voice is not one of the speakers of
    the checkpoint a voiced stage loads. A request naming no voice gets the stage's default
    (checked when the stage started); a stage whose checkpoint cannot be read here is left to
    refuse the voice itself."""
    for stage in pipeline.stages:
        if stage.kind != "torch" or stage.engine_args.get("engine") not in VOICED_ENGINES:
            continue
        stage_params = params.get(stage.id)
        voice = stage_params.extra.get("voice") if stage_params is not None else None
        if voice is None:
            continue
        model = stage_model(stage)
        voices = checkpoint_voices(model) if model else None
        if voices is not None and voice not in voices:
            raise RequestRejected(
                400,
                f"unknown voice {voice!r} (stage '{stage.name}'): this model has "
                f"{', '.join(voices)}",
            )


def declared_voices(pipeline: Any) -> tuple[str, ...] | None:
    """The voices ``pipeline``'s (a PipelineConfig) talker and token2wav stages can take, known
    before any of them starts (omni-qwen's ``omni_pipeline_voices``): the tiny model's speakers
    from its builder, another checkpoint's from its ``spk_dict.pt`` names; None when no voiced
    stage names a model whose speakers can be read here (the stages check the voice then)."""
    found: set[str] | None = None
    for stage in pipeline.stages:
        if stage.kind != "torch" or stage.engine_args.get("engine") not in VOICED_ENGINES:
            continue
        model = stage.engine_args.get("model")
        if not isinstance(model, str):
            continue
        voices: tuple[str, ...] | None
        if model == TINY_MODEL:
            from omni_qwen.build import SPEAKERS

            voices = SPEAKERS
        else:
            voices = checkpoint_voices(model)
        if voices is not None:  # every voiced stage must have it: the common ones
            found = set(voices) if found is None else found & set(voices)
    return None if found is None else tuple(sorted(found))


def checkpoint_voices(model: str) -> tuple[str, ...] | None:
    """The speakers of ``model``'s ``spk_dict.pt``, sorted (``model``: a directory, or a hub id
    already in the local hub cache), or None when there is no such file to read."""
    path = Path(model)
    if not path.is_dir():
        try:
            from huggingface_hub import snapshot_download

            path = Path(
                snapshot_download(model, allow_patterns=["spk_dict.pt"], local_files_only=True)
            )
        except Exception:  # not fetched (yet): the stages check the voice themselves
            return None
    file = path / "spk_dict.pt"
    return speaker_names(str(file)) if file.is_file() else None


@functools.lru_cache(maxsize=16)
def speaker_names(file: str) -> tuple[str, ...]:
    """The top-level keys of a ``torch.save``'d dict of speakers, from its pickle alone."""
    if not zipfile.is_zipfile(file):  # a legacy (pre-zip) torch file: let torch read it
        import torch

        return tuple(sorted(torch.load(file, weights_only=True, map_location="cpu")))
    with zipfile.ZipFile(file) as archive:
        pickled = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
        data = _NamesOnly(archive.open(pickled)).load()
    return tuple(sorted(str(name) for name in data))


def _stub(*args: Any, **kwargs: Any) -> None:
    return None


class _NamesOnly(pickle.Unpickler):
    """Unpickles the dict's structure; tensors and storages become None, and only the classes a
    torch.save'd dict of tensors names are resolved (nothing is imported or executed)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":
            return dict
        if module.startswith("torch"):
            return _stub
        raise pickle.UnpicklingError(f"spk_dict.pt: unexpected {module}.{name}")

    def persistent_load(self, pid: Any) -> None:
        return None
