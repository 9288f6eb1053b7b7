"""The orchestrator: its own thread and loop; routing, ordering, request state, terminals."""
