"""Tiny demo models, built locally and deterministically (no model hub is ever contacted).

``omni models build`` builds them into ``$OMNI_CACHE_DIR/models``; the first ``omni run`` that
needs one builds it. Checksums of every built file are committed in ``checksums.json``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from importlib import resources
from pathlib import Path

logger = logging.getLogger(__name__)

MODELS = ("tiny-thinker", "tiny-talker", "tiny-vocoder", "tiny-denoiser")
VERSION = "v1"


def models_root(cache_dir: Path) -> Path:
    return Path(cache_dir) / "models"


def model_path(name: str, cache_dir: Path) -> Path:
    return models_root(cache_dir) / f"{name}-{VERSION}"


def tree_hashes(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != ".complete"
    }


def committed_checksums() -> dict[str, dict[str, str]]:
    text = resources.files("omni_core.models").joinpath("checksums.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return,unused-ignore]


def ensure_model(name: str, cache_dir: Path) -> Path:
    """The model's directory, built first if it is missing (atomic: built aside, then renamed)."""
    if name not in MODELS:
        raise ValueError(f"unknown demo model '{name}' (known: {', '.join(MODELS)})")
    target = model_path(name, cache_dir)
    if (target / ".complete").exists():
        return target
    from omni_core.models.build import build_model

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".building")
    if staging.exists():
        import shutil

        shutil.rmtree(staging)
    logger.info("building demo model %s in %s", name, target)
    build_model(name, staging)
    (staging / ".complete").write_text("ok\n")
    if target.exists():
        import shutil

        shutil.rmtree(target)
    staging.rename(target)
    return target


def resolve_model(name_or_path: str, cache_dir: Path) -> str:
    """A model argument: a built-in demo model name (built if needed) or a local path."""
    if name_or_path in MODELS:
        return str(ensure_model(name_or_path, cache_dir))
    return name_or_path
