"""The data plane: arrays between stage processes travel through shared memory; only a small
:class:`TensorHandle` crosses a control channel.

``SharedMemoryDataPlane`` is the local implementation; ``RayDataPlane`` (the ``ray`` runtime)
puts arrays into Ray's object store. Engines get theirs from :func:`default_plane`.

A shared-memory segment is named after the process that takes it (its *owner*: the engine
process, whose stage processes inherit :data:`OWNER_ENV`) and that process's pid namespace:
``omni-<pid>-<pidns>-<random>``. A segment whose owner was SIGKILLed or OOM-killed before it took
it is reclaimed by the next start (:func:`reclaim_segments`); a live process's never is.
"""

from __future__ import annotations

import logging
import os
import re
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
OWNER_ENV = "OMNI_SHM_OWNER"  # set by the engine process for its stage processes: its pid
SEGMENT = re.compile(r"omni-(\d+)-([0-9a-f]+)-[0-9a-f]{16}")

logger = logging.getLogger(__name__)


def owner_pid() -> int:
    """The process that takes this process's segments: :data:`OWNER_ENV`, else this one."""
    value = os.environ.get(OWNER_ENV, "")
    return int(value) if value.isdecimal() else os.getpid()


def pid_namespace() -> str:
    """This process's pid namespace (hex inode; ``0`` where unknown): a pid means something only
    in its namespace (containers sharing ``/dev/shm`` do not share pids)."""
    try:
        return f"{os.stat('/proc/self/ns/pid').st_ino:x}"
    except OSError:
        return "0"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (someone else's included; a zombie counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reclaim_segments(directory: str | None = None) -> list[str]:
    """Remove the segments in ``directory`` whose owner process is gone (a SIGKILL or an OOM kill
    left them: nobody will take them); return their names. Segments of live processes, of another
    pid namespace, of an unknown namespace, and other files are left alone."""
    directory = directory or _default_directory()
    ns = pid_namespace()
    try:
        names = os.listdir(directory)
    except OSError as exc:
        logger.warning("cannot list %s for leftover shared-memory segments: %s", directory, exc)
        return []
    alive: dict[int, bool] = {}
    removed = []
    for name in names:
        match = SEGMENT.fullmatch(name)
        if match is None or match.group(2) != ns or ns == "0":
            continue
        pid = int(match.group(1))
        if pid not in alive:
            alive[pid] = pid == os.getpid() or pid_alive(pid)
        if alive[pid]:
            continue
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:  # another starting engine reclaimed it first
            continue
        except OSError as exc:
            logger.warning("cannot remove leftover shared-memory segment %s: %s", name, exc)
            continue
        removed.append(name)
    if removed:  # routine after a killed run: not worth a warning on an ordinary start
        logger.debug(
            "removed %d shared-memory segment(s) of dead processes from %s", len(removed), directory
        )
    return removed


def _default_directory() -> str:
    import tempfile

    return SHM_DIR or tempfile.gettempdir()


class SharedMemoryDataPlane:
    """``put`` writes an array into a new shared-memory file (tmpfs ``/dev/shm``); ``take`` reads
    it into a fresh array and removes the file (each handle is taken exactly once, by its
    consumer). Plain files rather than ``multiprocessing.shared_memory``: no resource-tracker
    round trips on the orchestrator's hot path, and no tracker in the producer to free a block
    its consumer still needs."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or _default_directory()
        self.prefix = f"omni-{owner_pid()}-{pid_namespace()}-"

    def put(self, array: Any) -> TensorHandle:
        import numpy as np

        array = np.ascontiguousarray(array)
        name = self.prefix + uuid.uuid4().hex[:16]
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
