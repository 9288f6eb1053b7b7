"""The data plane: arrays between stage processes travel through shared memory; only a small
:class:`TensorHandle` crosses a control channel.

``SharedMemoryDataPlane`` is the local implementation; ``RayDataPlane`` (the ``ray`` runtime)
puts arrays into Ray's object store. Engines get theirs from :func:`default_plane`.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class TensorHandle:
    name: str
    shape: tuple[int, ...]
    dtype: str
    ref: Any = field(default=None, compare=False)  # the object-store reference (Ray plane)


class DataPlane(Protocol):
    def put(self, array: Any) -> TensorHandle: ...
    def take(self, handle: TensorHandle) -> Any: ...


class SharedMemoryDataPlane:
    """``put`` copies an array into a new shared-memory block; ``take`` copies it out and frees
    the block (each handle is taken exactly once, by its consumer)."""

    def put(self, array: Any) -> TensorHandle:
        from multiprocessing import shared_memory

        import numpy as np

        array = np.ascontiguousarray(array)
        name = f"omni-{uuid.uuid4().hex[:16]}"
        block = shared_memory.SharedMemory(name=name, create=True, size=max(1, array.nbytes))
        try:
            np.ndarray(array.shape, array.dtype, buffer=block.buf)[...] = array
        finally:
            block.close()
        _untrack(name)
        return TensorHandle(name, tuple(array.shape), str(array.dtype))

    def take(self, handle: TensorHandle) -> Any:
        from multiprocessing import shared_memory

        import numpy as np

        block = shared_memory.SharedMemory(name=handle.name)
        try:
            return np.ndarray(handle.shape, handle.dtype, buffer=block.buf).copy()
        finally:
            block.close()
            block.unlink()


class RayDataPlane:
    """Arrays through Ray's object store: the handle carries an ``ObjectRef``; ``take`` fetches
    it (zero-copy on the same node) and drops the reference, so the store frees it."""

    def put(self, array: Any) -> TensorHandle:
        import numpy as np
        import ray

        array = np.ascontiguousarray(array)
        ref = ray.put(array)
        return TensorHandle(ref.hex(), tuple(array.shape), str(array.dtype), ref=ref)

    def take(self, handle: TensorHandle) -> Any:
        import ray

        return ray.get(handle.ref)


PLANE_ENV = "OMNI_DATA_PLANE"


def default_plane() -> DataPlane:
    """The data plane of this process: ``OMNI_DATA_PLANE=ray`` (set in Ray stage actors) or
    shared memory."""
    if os.environ.get(PLANE_ENV) == "ray":
        return RayDataPlane()
    return SharedMemoryDataPlane()


def plane_for(handle: TensorHandle, fallback: DataPlane) -> DataPlane:
    return RayDataPlane() if handle.ref is not None else fallback


def _untrack(name: str) -> None:
    """The consumer frees the block: stop the producer's resource tracker from doing it too."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.unregister(f"/{name}", "shared_memory")
    except Exception:  # pragma: no cover - best effort
        pass


def materialize(payload: Any, plane: DataPlane) -> Any:
    """Replace handles inside a payload (an object with array fields) by arrays."""
    if isinstance(payload, TensorHandle):
        return plane.take(payload)
    fields = getattr(payload, "__dataclass_fields__", None)
    if fields:
        for name in fields:
            value = getattr(payload, name)
            if isinstance(value, TensorHandle):
                setattr(payload, name, plane.take(value))
    return payload
