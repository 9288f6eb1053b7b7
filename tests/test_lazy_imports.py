"""``import omni_core``, ``omni --help`` and ``omni plugins list`` load no vLLM, torch or Ray,
with every installed plugin loaded too."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("vllm", "torch", "transformers", "numpy", "ray")


@pytest.mark.parametrize(
    "code",
    [
        "import omni_core",
        "from omni_core.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "from omni_core.cli import main\ntry:\n    main(['plugins', 'list'])\nexcept SystemExit:\n"
        "    pass",
        "from omni_core.cli import main\ntry:\n    main(['config', 'validate', 'tiny-omni'])\n"
        "except SystemExit:\n    pass",
    ],
)
def test_no_engine_library_is_imported(code):
    probe = code + f"\nimport sys\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
