"""Third-party noise kept out of an ordinary command's output (``omni --verbose`` shows it).

transformers' advisory warnings ("... may result in unexpected behavior") and its progress bars
("Writing model shards"), and Hugging Face Hub's bars, are turned off for the command and the
stage processes it starts (they inherit the environment); Python warnings of third-party
packages are not shown. omni-core's own log lines are untouched (``--log-level``).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# set for the command (and inherited by its stage processes) unless the user set them
QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# loggers of libraries that log to stderr through the root logger (or their own handler)
QUIET_LOGGERS = ("transformers", "huggingface_hub", "tokenizers")
# packages whose Python warnings an ordinary command does not show
QUIET_WARNINGS = ("transformers", "huggingface_hub", "torch", "tokenizers")


@contextmanager
def quiet_third_party(enabled: bool = True) -> Iterator[None]:
    """While a command runs: third-party warnings and progress bars off (``enabled``), the
    environment and the loggers' levels restored afterwards (``main()`` runs in-process)."""
    if not enabled:
        yield
        return
    saved_env = {key: os.environ.get(key) for key in QUIET_ENV}
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    loggers = {name: logging.getLogger(name) for name in QUIET_LOGGERS}
    levels = {name: logger.level for name, logger in loggers.items()}
    for logger in loggers.values():
        logger.setLevel(logging.ERROR)
    _already_imported()
    with warnings.catch_warnings():
        for package in QUIET_WARNINGS:
            warnings.filterwarnings("ignore", module=rf"{package}(\.|$)")
        try:
            yield
        finally:
            for name, logger in loggers.items():
                logger.setLevel(levels[name])
            for key, before in saved_env.items():
                if before is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = before


def _already_imported() -> None:
    """The libraries read their settings at import: quiet the ones already imported."""
    if "transformers" in sys.modules:
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
        except Exception:  # pragma: no cover - another transformers layout
            pass
    if "huggingface_hub" in sys.modules:
        try:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        except Exception:  # pragma: no cover
            pass
