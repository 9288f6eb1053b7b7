# The testing kit's fixtures (omni_settings, plugin_host, fake_entry_points, make_engine) and its
# `scripted` stage kind. In omni-core's own suite, tests/test_cfg_plugin.py runs these modules.
pytest_plugins = ["omni_core.testing"]
