"""Benchmarks and stress runs shipped with omni-core (``omni bench NAME``)."""
