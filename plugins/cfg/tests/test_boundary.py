"""The core imports nothing of omni_cfg and carries no CFG vocabulary.

CFG vocabulary (what only a guidance plugin may say): the token ``cfg`` in any case, the plugin's
import name ``omni_cfg``, "classifier"(-free), ``guidance_scale``, "negative prompt" (any spelling)
and "unconditional". Generic words stay legal in the core: "companion" (its admission API admits
companion requests of any kind) and "guidance"/"conditioning" (the diffusion kind's weighted
conditionings are a generic seam).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import omni_core

CORE = Path(omni_core.__file__).resolve().parent
VOCABULARY = re.compile(
    r"\bcfg\b|omni_cfg|classifier|guidance_scale|negative[ _-]?prompt|unconditional", re.I
)


def core_files():
    files = sorted(p for p in CORE.rglob("*") if p.suffix in (".py", ".yaml") and p.is_file())
    assert len(files) > 40  # the whole package, not an empty glob
    return files


def test_core_source_never_imports_the_plugin():
    offenders = []
    for path in core_files():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("omni_cfg") else []
            offenders += [f"{path}: {n}" for n in names if n.split(".")[0] == "omni_cfg"]
    assert offenders == []


def test_core_source_carries_no_cfg_vocabulary():
    hits = [
        f"{path.relative_to(CORE)}:{i}: {line.strip()}"
        for path in core_files()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if VOCABULARY.search(line)
    ]
    assert hits == []


def test_vocabulary_pattern_catches_what_it_should():
    for text in (
        "self.cfg = 1",
        "CFG companions",
        "import omni_cfg",
        "negative_prompt",
        "guidance_scale",
    ):
        assert VOCABULARY.search(text), text
    for text in ("config", "companion", "weighted conditionings", "guidance plugins fill"):
        assert not VOCABULARY.search(text), text


def test_a_core_engine_runs_without_importing_the_plugin():
    code = (
        "import asyncio, sys\n"
        "from omni_core import PluginHost, OmniSettings, create_engine\n"
        "s = OmniSettings()\n"
        "e = create_engine('scripted-chain', settings=s,"
        " plugins=PluginHost.create(s, load_entry_points=False))\n"
        "async def go():\n"
        "    return [o async for o in e.generate('hi')]\n"
        "outs = asyncio.run(go()); e.shutdown()\n"
        "assert outs[-1].finished\n"
        "print(sorted(m for m in sys.modules if m.startswith('omni_cfg')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
