"""What the torch stage engines (``vocoder``, ``torch``) share in their stage process."""

from __future__ import annotations

from typing import Any

CONTROL = ("sleep", "wake_up", "pause_scheduler", "resume_scheduler")


class TorchStageEngine:
    """Control RPCs are accepted (these engines hold no KV cache and have no scheduler to pause);
    ``die`` kills the replica (fault injection); anything else is unsupported."""

    kind = "torch"
    step_delay_s = 0.0
    dead = False

    def rpc(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method in CONTROL:
            return {"ok": True, "method": method}
        if method == "die":
            self.dead = True
            return {"dead": True}
        raise NotImplementedError(f"{self.kind} has no RPC '{method}'")
