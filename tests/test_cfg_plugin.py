"""Runs the omni-cfg plugin's own tests (plugins/cfg/tests) in this suite (scripted stages).

The plugin is installed in the dev environment (setup.sh: ``pip install -e plugins/cfg``); on
real engines it guides omni-qwen-image's qwen-image (plugins/qwen-image/tests: parity with
diffusers' QwenImagePipeline guided, and omni run qwen-image --negative-prompt).
"""

from __future__ import annotations

from tests.plugin_tests import ROOT, load_tests

TESTS = ROOT / "plugins" / "cfg" / "tests"

globals().update(
    load_tests(TESTS / "test_lifecycle.py", "omni_cfg_tests.lifecycle", ("submitted",))
)
globals().update(load_tests(TESTS / "test_tracker_config.py", "omni_cfg_tests.tracker_config"))
globals().update(load_tests(TESTS / "test_boundary.py", "omni_cfg_tests.boundary"))
