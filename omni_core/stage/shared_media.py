"""A prompt's large images and arrays cross to a stage process through shared memory.

Pickling a decoded 16 Mpx image copies its 48 MB of pixels several times (pickle, the frame, the
socket's buffer) while holding the GIL: on the orchestrator's loop that blocked it for
121-279 ms. :func:`share_media` (run in a thread by
:class:`~omni_core.stage.process.ProcessStageClient`) writes each large image or array to a
shared-memory file of the data plane, an image a band of rows at a time, and leaves in the prompt
a small stand-in whose pickle is a call that reads the file back (and removes it) where it is
unpickled: the stage process. An image is rebuilt as unpickling it would have (its class, mode,
size, palette and ``info``: pixel-equal), an array as the data plane takes it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from omni_core.stage.dataplane import SharedMemoryDataPlane, TensorHandle


def media_bytes(value: Any, depth: int = 0) -> int:
    """About how many bytes of arrays, images and byte strings ``value`` holds (in dicts, lists
    and tuples, a few levels deep; a list of token ids is not walked): what packing it copies."""
    kind = type(value)
    if value is None or kind is str or kind is int or kind is float or kind is bool:
        return 0
    if kind is bytes or kind is bytearray:
        return len(value)
    if kind is dict or kind is list or kind is tuple:
        items = value.values() if kind is dict else value
        if depth > 4 or (kind is list and value and type(value[0]) is int):
            return 0
        return sum(media_bytes(item, depth + 1) for item in items)
    nbytes = getattr(value, "nbytes", None)  # numpy arrays
    if type(nbytes) is int:
        return nbytes
    module = kind.__module__
    if module.startswith("PIL."):  # an image: pickled as its raw pixels
        width, height = value.size
        return width * height * len(value.getbands())
    if module.startswith("torch"):
        return int(value.nelement() * value.element_size())
    return 0


SHARE_MIN_BYTES = 1 << 18  # an image or array this large crosses as a shared-memory file
_BAND_BYTES = 1 << 22  # an image's pixels are written in bands of rows of about this size


class _Shared:
    """Stands for an image or array of a prompt written to a shared-memory file: pickled as a
    call that reads (and removes) the file where it is unpickled: the stage process."""

    def __init__(self, rebuild: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.rebuild = rebuild
        self.args = args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.rebuild, self.args)


def _shared_image(path: str, kind: Any, info: Any, mode: str, size: Any, palette: Any) -> Any:
    """The image a :class:`_Shared` stands for, rebuilt as unpickling would (``__setstate__``)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    finally:
        os.unlink(path)
    image = kind.__new__(kind)
    image.__setstate__([info, mode, size, palette, data])
    return image


def _shared_array(directory: str, name: str, shape: Any, dtype: str) -> Any:
    return SharedMemoryDataPlane(directory).take(TensorHandle(name, tuple(shape), dtype))


def _put_image(image: Any, plane: SharedMemoryDataPlane) -> _Shared:
    """``image``'s pixels (what pickling it copies) into a file, written a band of rows at a time
    (no copy of the whole image while holding the GIL)."""
    width, height = image.size
    rows = max(1, _BAND_BYTES // max(1, width * len(image.getbands())))
    name = plane.prefix + uuid.uuid4().hex[:16]
    path = os.path.join(plane.directory, name)
    with open(path, "xb") as f:
        for top in range(0, height, rows):
            f.write(image.crop((0, top, width, min(height, top + rows))).tobytes())
    args = (path, type(image), image.info, image.mode, image.size, image.getpalette())
    return _Shared(_shared_image, args)


def share_media(value: Any, plane: SharedMemoryDataPlane, paths: list[str], depth: int = 0) -> Any:
    """``value`` with each large image and array in it (dicts, lists, tuples, a few levels deep)
    written to a shared-memory file (its path appended to ``paths``) and replaced by a small
    stand-in its pickle carries: the stage process reads it back. Blocking: run it in a thread."""
    kind = type(value)
    if kind is dict:
        if depth > 4:
            return value
        return {key: share_media(item, plane, paths, depth + 1) for key, item in value.items()}
    if kind is list or kind is tuple:
        if depth > 4 or (kind is list and value and type(value[0]) is int):
            return value
        items = [share_media(item, plane, paths, depth + 1) for item in value]
        return items if kind is list else tuple(items)
    if media_bytes(value) < SHARE_MIN_BYTES:
        return value
    if kind.__module__.startswith("PIL."):
        shared = _put_image(value, plane)
        paths.append(shared.args[0])
        return shared
    if kind.__module__ == "numpy" and kind.__name__ == "ndarray" and not value.dtype.hasobject:
        handle = plane.put(value)
        paths.append(os.path.join(plane.directory, handle.name))
        return _Shared(_shared_array, (plane.directory, handle.name, handle.shape, handle.dtype))
    return value


__all__ = ["SHARE_MIN_BYTES", "media_bytes", "share_media"]
