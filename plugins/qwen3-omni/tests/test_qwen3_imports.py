"""omni-qwen3 builds on the family kit (omni_core.family) and omni-qwen's declared public API
(omni_qwen.api, omni_qwen.compat), never on omni-qwen's private modules."""

from __future__ import annotations

import ast
from pathlib import Path

import omni_qwen3
import pytest

SRC = Path(omni_qwen3.__file__).parent
PUBLIC = {"omni_qwen.api", "omni_qwen.compat"}
PENDING: set[str] = set()


def private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = (
                [node.module]
                if node.module != "omni_qwen"
                else [f"omni_qwen.{a.name}" for a in node.names]
            )
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [
            f"{path.name}:{node.lineno}: {name}"
            for name in names
            if (name == "omni_qwen" or name.startswith("omni_qwen.")) and name not in PUBLIC
        ]
    return found


def test_omni_qwen3_imports_no_private_module_of_omni_qwen():
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in private_imports(path)]
    assert {hit.split(":")[0] for hit in found} == PENDING, found


def test_the_check_sees_a_private_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from omni_qwen.api import thinker_stage\nfrom omni_qwen import build\n"
        "import omni_qwen.talker_batch\nfrom omni_core.family import redraw\n"
    )
    assert private_imports(module) == ["m.py:2: omni_qwen.build", "m.py:3: omni_qwen.talker_batch"]


def test_every_name_of_omni_qwens_declared_api_imports():
    import omni_qwen.api as api

    assert api.__all__ and all(getattr(api, name) is not None for name in api.__all__)
    with pytest.raises(AttributeError, match="build"):
        api.build  # noqa: B018  (a private module is not part of it)
