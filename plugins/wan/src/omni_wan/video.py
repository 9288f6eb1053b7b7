"""MP4 in and out with OpenCV (``opencv-python-headless``, already pinned in the vLLM CPU lock:
no new dependency). Its bundled FFmpeg writes MPEG-4 Part 2 (``mp4v``) in an ISO MP4 container
on CPU wheels (no H.264 encoder there: ``avc1`` fails to open); every FFmpeg-based reader,
PyAV and OpenCV included, decodes it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FOURCC = "mp4v"
MEDIA_TYPE = "video/mp4"


class VideoEncodeError(RuntimeError):
    """OpenCV could not open an MP4 writer (the wheel's FFmpeg lacks the codec)."""


def write_mp4(frames: Any, fps: int, path: str | Path) -> Path:
    """``frames`` uint8 ``[F, H, W, 3]`` (RGB) as an MP4 at ``path``."""
    import cv2

    path = Path(path)
    height, width = frames.shape[1:3]
    writer = cv2.VideoWriter(
        str(path), cv2.VideoWriter.fourcc(*FOURCC), float(fps), (width, height)
    )
    if not writer.isOpened():
        raise VideoEncodeError(f"OpenCV cannot write {FOURCC} MP4 to {path}")
    try:
        for frame in frames:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    return path


def mp4_bytes(frames: Any, fps: int) -> bytes:
    """``frames`` as MP4 bytes (OpenCV writes files only: a temporary one, removed)."""
    fd, name = tempfile.mkstemp(suffix=".mp4", prefix="omni-wan-")
    os.close(fd)
    try:
        return write_mp4(frames, fps, name).read_bytes()
    finally:
        os.unlink(name)


def read_mp4(data: bytes) -> tuple[Any, float]:
    """MP4 bytes → (uint8 RGB frames ``[F, H, W, 3]``, fps)."""
    import cv2
    import numpy as np

    fd, name = tempfile.mkstemp(suffix=".mp4", prefix="omni-wan-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        capture = cv2.VideoCapture(name)
        frames = []
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
        fps = float(capture.get(cv2.CAP_PROP_FPS))
        capture.release()
    finally:
        os.unlink(name)
    return np.stack(frames) if frames else np.zeros((0, 0, 0, 3), "uint8"), fps


@dataclass
class Video:
    """A ``wan`` stage's finished video: ``frames`` uint8 RGB ``[F, H, W, 3]``, at ``fps``."""

    frames: Any
    fps: int

    def save(self, output_dir: Path, stem: str) -> str:
        """Written as ``output_dir/stem.mp4`` (what ``omni run`` calls); a line saying so."""
        output_dir.mkdir(parents=True, exist_ok=True)
        path = write_mp4(self.frames, self.fps, output_dir / f"{stem}.mp4")
        count, height, width, _ = self.frames.shape
        return f"video: {path} ({width}x{height}, {count} frames at {self.fps} fps)"


@dataclass
class Progress:
    """A denoising step done: a ``wan`` stage's non-final output, one per step (what progress
    bars and the videos route's ``progress`` count)."""

    step: int
    steps: int
