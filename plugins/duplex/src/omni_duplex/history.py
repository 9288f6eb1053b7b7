"""A session's history edits: ``conversation.item.truncate`` (what the user heard of a reply)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from omni_duplex import protocol as P
from omni_duplex.errors import DuplexError

if TYPE_CHECKING:
    from omni_duplex.session import SessionRunner


def truncate(runner: SessionRunner, cmd: P.TruncateItem) -> None:
    """Keep only what the user heard of an assistant reply: the share of its text spoken in
    ``audio_end_ms`` of its audio (cut at a word boundary); the model never sees the rest."""
    item = next((h for h in runner.history if h["item_id"] == cmd.item_id), None)
    if item is None or item["role"] != "assistant":
        raise DuplexError(
            "item_truncate_invalid_item_id",
            f"conversation.item.truncate: 'item_id': no assistant item '{cmd.item_id}' in the "
            "conversation",
        )
    if cmd.content_index != 0:
        raise DuplexError(
            "invalid_event",
            f"conversation.item.truncate: 'content_index': {cmd.content_index}; a reply has "
            "one content part (0)",
        )
    total = item.get("audio_ms", 0)
    if cmd.audio_end_ms > total:
        raise DuplexError(
            "invalid_event",
            f"conversation.item.truncate: 'audio_end_ms' {cmd.audio_end_ms} is past the "
            f"reply's audio ({total} ms)",
        )
    text = item["text"]
    keep = len(text) * cmd.audio_end_ms // total if total else 0
    if 0 < keep < len(text) and not text[keep].isspace():
        keep = text.rfind(" ", 0, keep) + 1  # no half word
    cut = text[:keep].rstrip()
    runner.history_bytes -= len(text.encode("utf-8", "surrogatepass"))
    runner.history_bytes += len(cut.encode("utf-8", "surrogatepass"))
    item["text"], item["audio_ms"] = cut, cmd.audio_end_ms
    runner.emit(
        P.ITEM_TRUNCATED,
        item_id=cmd.item_id,
        content_index=0,
        audio_end_ms=cmd.audio_end_ms,
    )
