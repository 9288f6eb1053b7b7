"""Hand-built media files for the media tests: RIFF/WAV chunks (any format tag, including float
and WAVE_FORMAT_EXTENSIBLE, which Python's ``wave`` cannot write) and PNGs whose header declares
any size, with as little pixel data as wanted."""

from __future__ import annotations

import base64
import struct
import zlib

from omni_core.chat_media import EXTENSIBLE_TAG, GUID_TAIL


def chunk(kind: bytes, body: bytes, size: int | None = None) -> bytes:
    """A RIFF chunk (padded to an even length); ``size`` overrides the declared size."""
    declared = len(body) if size is None else size
    return kind + struct.pack("<I", declared) + body + b"\0" * (len(body) & 1)


def fmt_chunk(
    tag: int, channels: int, rate: int, bits: int, *, sub: int = 1, align: int | None = None
) -> bytes:
    """A ``fmt `` chunk's body; an extensible one (``tag`` EXTENSIBLE_TAG) has subformat ``sub``."""
    block = channels * bits // 8 if align is None else align
    body = struct.pack("<HHIIHH", tag, channels, rate, (rate * block) & 0xFFFFFFFF, block, bits)
    if tag == EXTENSIBLE_TAG:
        body += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", sub) + GUID_TAIL
    return body


def riff(fmt: bytes, data: bytes, *, before: bytes = b"", data_size: int | None = None) -> bytes:
    """A WAV file: ``before`` (other chunks), then ``fmt `` and ``data`` chunks."""
    body = b"WAVE" + before + chunk(b"fmt ", fmt) + chunk(b"data", data, data_size)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def png(width: int, height: int, idat: bytes, *, depth: int = 1, color: int = 0) -> bytes:
    """A PNG declaring ``width`` x ``height`` (grey ``depth``-bit by default) with ``idat`` as its
    compressed pixel data (valid CRCs)."""

    def part(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack("!I", len(data)) + kind + data + struct.pack("!I", zlib.crc32(kind + data))
        )

    header = struct.pack("!IIBBBBB", width, height, depth, color, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + part(b"IHDR", header) + part(b"IDAT", idat) + part(b"IEND", b"")


def blank_png(width: int, height: int) -> bytes:
    """A complete 1-bit PNG of ``width`` x ``height``: tiny when compressed, huge when decoded."""
    row = b"\0" * (1 + (width + 7) // 8)
    return png(width, height, zlib.compress(row * height, 9))


def data_url(raw: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64,{b64(raw)}"
