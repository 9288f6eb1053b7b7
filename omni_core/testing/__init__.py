"""The omni-core testing kit for plugin authors.

* the ``scripted`` stage kind (:mod:`omni_core.testing.scripted`): deterministic outputs, fault
  injection (``fail_after``, ``die_after``, ``hang_after``, ``abort_fails``, ``rpc_error``) and
  ``process: true`` replicas;
* the test tiers (:mod:`omni_core.testing.tiers`, loaded with the fixtures): markers ``engine``,
  ``ray``, ``browser``, ``slow``, one extras gate (``tier_directory``), Hypothesis profiles;
* pytest fixtures, opt-in with ``pytest_plugins = ["omni_core.testing"]``: ``omni_settings``,
  ``plugin_host`` (a fresh plugin manager per test), ``fake_entry_points``, ``make_engine``
  (an engine from a YAML string, shut down after the test);
* the family kit's parity harness (:mod:`omni_core.testing.parity`): the ``built_model``
  fixture, exact and bounded-with-sensitivity comparisons against a reference library;
* :func:`omni_core.testing.public_api.public_api_violations`: whether a plugin's source uses only
  omni-core's public API (``omni_core.PUBLIC_MODULES``, no private of a core object).

Importing this package outside pytest does not import pytest.
"""

from __future__ import annotations

import sys

from omni_core.testing.scripted_core import ScriptedArgs, prompt_tokens, scripted_token

if "pytest" in sys.modules:  # loaded as a pytest plugin: expose the fixtures
    from omni_core.testing.fixtures import (  # noqa: F401
        fake_entry_points,
        make_engine,
        omni_settings,
        plugin_host,
    )
    from omni_core.testing.parity import built_model  # noqa: F401

# loaded as a pytest plugin: the tiers plugin comes with it (pytest imports it once)
pytest_plugins = ["omni_core.testing.tiers"]

__all__ = ["ScriptedArgs", "prompt_tokens", "scripted_token"]
