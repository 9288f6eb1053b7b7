"""docs/plugins.md's "The smallest plugin" is a package that builds and a plugin of the current
API: its ``pyproject.toml`` block has a build system, a version and the entry point; its module
block imports, declares ``PLUGIN_API_VERSION`` and registers its bridge through the testing kit."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from omni_core import PLUGIN_API_VERSION
from omni_core.plugin.hooks import PluginHost
from tests.docs.blocks import DOCS, section_blocks

SECTION = "The smallest plugin"


def _package(root: Path) -> dict:
    """Writes the section's two blocks as a source tree under ``root``; its pyproject."""
    toml, py = section_blocks(DOCS / "plugins.md", SECTION)
    assert (toml.lang, py.lang) == ("toml", "python"), (toml.where, py.where)
    (root / "pyproject.toml").write_text(toml.code)
    first = py.code.splitlines()[0]
    assert first.startswith("# src/omni_mine/plugin.py"), first
    package = root / "src" / "omni_mine"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(py.code)
    return tomllib.loads(toml.code)


def test_the_pyproject_block_is_installable(tmp_path):
    project = _package(tmp_path)
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["build-system"]["requires"]
    assert project["project"]["version"]
    entry = project["project"]["entry-points"]["omni_core.plugins"]
    assert entry == {"mine": "omni_mine.plugin"}


def test_the_module_block_loads_with_the_current_api(
    tmp_path, monkeypatch, fake_entry_points, omni_settings
):
    project = _package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.delitem(sys.modules, "omni_mine", raising=False)
    monkeypatch.delitem(sys.modules, "omni_mine.plugin", raising=False)
    module = importlib.import_module("omni_mine.plugin")
    assert module.OMNI_PLUGIN_API_VERSION == PLUGIN_API_VERSION
    meta = project["project"]
    fake_entry_points.add("mine", module, distribution=meta["name"], version=meta["version"])
    host = PluginHost.create(omni_settings)
    bridge = host.bridges()["first-text"]
    info = host.pm.plugin_info["mine"]
    assert (info.distribution, info.version) == ("omni-mine", "0.1.0")
    assert host.hooks_of("mine") == ["omni_register_bridges"]
    assert bridge.func([SimpleNamespace(text="hi")], "prompt", None) == "hi"
    assert bridge.func([SimpleNamespace(text="")], "prompt", None) is None


@pytest.mark.slow
def test_the_package_builds_a_wheel_with_the_entry_point(tmp_path):
    """``pip wheel`` of the section's package (what ``pip install -e .`` needs first), offline:
    the venv's setuptools, no build isolation."""
    (tmp_path / "src-tree").mkdir()
    _package(tmp_path / "src-tree")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "-w", str(tmp_path / "dist"), str(tmp_path / "src-tree")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("omni_mine-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "omni_mine/plugin.py" in names
        (eps,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = zf.read(eps).decode()
    assert "[omni_core.plugins]" in text and "mine = omni_mine.plugin" in text
