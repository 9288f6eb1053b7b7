"""Start-up hook of processes that load Qwen2.5-Omni without torchvision (omni-qwen's shim).

This directory goes on ``PYTHONPATH`` of those processes (omni-qwen's pipelines put it there for
their vLLM stage, whose model-inspection subprocesses inherit it). It installs the family kit's
shim (:mod:`omni_core.family.compat`) only when torchvision is not importable, and never fails
start-up.
"""

try:
    from omni_core.family import compat

    compat.install()
except Exception as exc:  # pragma: no cover - a broken shim must not break the interpreter
    import sys

    print(f"omni-qwen sitecustomize: shim not installed: {exc!r}", file=sys.stderr)
