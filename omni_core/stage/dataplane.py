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


SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


class SharedMemoryDataPlane:
    """``put`` writes an array into a new shared-memory file (tmpfs ``/dev/shm``); ``take`` reads
    it into a fresh array and removes the file (each handle is taken exactly once, by its
    consumer). Plain files rather than ``multiprocessing.shared_memory``: no resource-tracker
    round trips on the orchestrator's hot path, and no tracker in the producer to free a block
    its consumer still needs."""

    def __init__(self, directory: str | None = None) -> None:
        import tempfile

        self.directory = directory or SHM_DIR or tempfile.gettempdir()

    def put(self, array: Any) -> TensorHandle:
        import numpy as np

        array = np.ascontiguousarray(array)
        name = f"omni-{uuid.uuid4().hex[:16]}"
        with open(os.path.join(self.directory, name), "xb") as f:
            f.write(memoryview(array).cast("B"))
        return TensorHandle(name, tuple(array.shape), str(array.dtype))

    def take(self, handle: TensorHandle) -> Any:
        import numpy as np

        path = os.path.join(self.directory, handle.name)
        array: Any = np.empty(handle.shape, dtype=handle.dtype)
        try:
            with open(path, "rb") as f:
                f.readinto(memoryview(array).cast("B"))
        finally:
            os.unlink(path)
        return array


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


def materialize(payload: Any, plane: DataPlane) -> Any:
    """Replace handles inside a payload (an object with array fields, or with a dict of arrays)
    by arrays."""
    if isinstance(payload, TensorHandle):
        return plane.take(payload)
    fields = getattr(payload, "__dataclass_fields__", None)
    if fields:
        for name in fields:
            value = getattr(payload, name)
            if isinstance(value, TensorHandle):
                setattr(payload, name, plane.take(value))
            elif isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, TensorHandle):
                        value[key] = plane.take(item)
    return payload
