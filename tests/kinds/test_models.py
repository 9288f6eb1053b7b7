"""Demo models rebuild byte-identically in a fresh process (checksums committed in the repo)."""

from __future__ import annotations

import json
import subprocess
import sys

from omni_core.models import MODELS, committed_checksums


def test_rebuild_in_fresh_process_matches_committed_checksums(tmp_path):
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from omni_core.models import MODELS, ensure_model, tree_hashes\n"
        f"root = Path({str(tmp_path)!r})\n"
        "print(json.dumps({m: tree_hashes(ensure_model(m, root)) for m in MODELS}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    built = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(built) == set(MODELS)
    assert built == committed_checksums()
