"""Pipelines shipped with omni-core (registered by the built-in plugin)."""
