"""Control RPCs: one method called on every live replica of the addressed stages."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from omni_core.errors import RpcError
from omni_core.messages import RpcCall
from omni_core.stage.client import CONTROL_METHODS

if TYPE_CHECKING:
    from omni_core.stage.pool import StagePool


async def collective_rpc(pools: dict[int, StagePool], order: list[int], call: RpcCall) -> list[Any]:
    """Call ``call.method`` on every live replica of the addressed stages, in stage order.

    Control methods raise :class:`RpcError` naming the replica when a worker fails; other
    methods answer ``{"supported": False, "error": ...}`` for that replica.
    """
    method, args, kwargs = call.method, call.args, call.kwargs
    stage_ids, timeout = call.stage_ids, call.timeout
    if stage_ids is not None:
        unknown = [s for s in stage_ids if s not in pools]
        if unknown:
            raise RpcError(f"unknown stage id(s) {unknown} (pipeline stages: {order})")
        order = [s for s in order if s in stage_ids]
    results: list[Any] = []
    for sid in order:
        pool = pools[sid]
        for replica in pool.live():
            client = pool.client(replica)
            assert client is not None
            where = f"stage '{pool.stage.name}' (id {sid}) replica {replica}"
            try:
                pending = client.collective_rpc(method, tuple(args), kwargs)
                value = await (asyncio.wait_for(pending, timeout) if timeout else pending)
            except Exception as exc:
                if method in CONTROL_METHODS:
                    raise RpcError(
                        f"{method} failed on {where}: {type(exc).__name__}: {exc}"
                    ) from exc
                if isinstance(exc, TimeoutError):
                    value = {
                        "supported": False,
                        "error": f"TimeoutError: {method} timed out after {timeout}s",
                    }
                else:
                    value = {"supported": False, "error": f"{type(exc).__name__}: {exc}"}
            results.append(value)
    return results
