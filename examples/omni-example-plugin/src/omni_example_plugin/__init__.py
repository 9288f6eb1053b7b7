"""omni-example-plugin: a complete example of an omni-core plugin.

omni-core finds it through the entry point ``example = "omni_example_plugin.plugin"`` in the
group ``omni_core.plugins``; :mod:`omni_example_plugin.plugin` holds the hook implementations.
"""

__version__ = "0.1.0"
