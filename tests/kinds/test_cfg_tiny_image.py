"""Runs the omni-cfg plugin's real-engine test (guided tiny-image) in this suite."""

from __future__ import annotations

from tests.plugin_tests import ROOT, load_tests

globals().update(
    load_tests(
        ROOT / "plugins" / "cfg" / "tests" / "test_tiny_image.py",
        "omni_cfg_tests.tiny_image",
        ("image_engine",),
    )
)
