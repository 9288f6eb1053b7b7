"""Stage clients (transport and lifecycle of one replica) and stage pools."""
