"""omni-duplex: full-duplex speech sessions for omni-core (the ``duplex`` engine kind).

omni-core finds it through the entry point ``duplex = "omni_duplex.plugin"``. The public API
(:class:`~omni_duplex.engine.DuplexOmniEngine`, the commands and events) lives in submodules so
that loading the plugin stays cheap.
"""

__version__ = "0.1.0"
