"""Start-up hook of processes that load a Qwen2-VL-family model without torchvision.

This directory goes on ``PYTHONPATH`` of those processes (a family's pipelines put it there for
their vLLM stage, whose model-inspection subprocesses inherit it:
:data:`omni_core.family.compat.PORTABLE_PYTHONPATH`). It installs :mod:`omni_core.family.compat`
only when torchvision is not importable, and never fails start-up.
"""

try:
    from omni_core.family import compat

    compat.install()
except Exception as exc:  # pragma: no cover - a broken shim must not break the interpreter
    import sys

    print(f"omni-core family sitecustomize: shim not installed: {exc!r}", file=sys.stderr)
