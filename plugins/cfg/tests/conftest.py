# The testing kit's fixtures (omni_settings, plugin_host, fake_entry_points, make_engine) and its
# `scripted` stage kind. omni-core's suite collects this directory through its testpaths.
pytest_plugins = ["omni_core.testing"]
