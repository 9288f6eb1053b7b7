"""Forward gates (``omni_forward_gate``): whether a forward may happen now, and how the
plugins' results combine.

Every impl is asked; any ``defer=True`` holds the forward. Otherwise all ``extra_sources`` are
appended to the bridge's sources (in the order pluggy called the impls) and the ``transform``s
are composed in a fixed order that does not depend on how plugins were registered: ascending
``ForwardGate.order``, ties by plugin name; each transform receives the previous one's result,
the first one the bridge's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_core.plugin.hooks import PluginHost
    from omni_core.views import OrchestratorPort, RequestView

Transform = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gates let a forward happen: what they add to it."""

    extra_sources: tuple[Any, ...] = ()
    transforms: tuple[Transform, ...] = ()

    def apply(self, prompt: Any) -> Any:
        for transform in self.transforms:
            prompt = transform(prompt)
        return prompt


OPEN = Verdict()


def ask_gates(
    hooks: PluginHost, run: RequestView, stage_id: int, port: OrchestratorPort
) -> Verdict | None:
    """The combined verdict of every gate on forwarding ``run`` to ``stage_id``; None: held."""
    if not hooks.has_forward_gates:
        return OPEN
    gates = hooks.forward_gates(run.run_id, run, stage_id, port)
    if any(gate.defer for _, gate in gates):
        return None
    keyed: list[tuple[int, str, int, Transform]] = [
        (gate.order, plugin, i, gate.transform)
        for i, (plugin, gate) in enumerate(gates)
        if gate.transform is not None
    ]
    transforms = tuple(transform for *_, transform in sorted(keyed, key=lambda k: k[:3]))
    extra = tuple(source for _, gate in gates for source in gate.extra_sources)
    return Verdict(extra, transforms)
