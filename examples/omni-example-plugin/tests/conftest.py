# The testing kit's fixtures (omni_settings, plugin_host, fake_entry_points, make_engine) and its
# `scripted` stage kind. Opt-in: nothing is loaded unless a conftest asks for it.
pytest_plugins = ["omni_core.testing"]
