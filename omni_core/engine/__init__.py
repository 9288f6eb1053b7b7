"""Engines: the caller-side face of a pipeline (requests in, outputs out)."""
