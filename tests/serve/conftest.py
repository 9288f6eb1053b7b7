from omni_core.testing.server import free_port, running_server

__all__ = ["free_port", "running_server"]
