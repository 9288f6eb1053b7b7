"""A large image reaches the real vLLM thinker through the data plane: its prompt is packed off
the orchestrator loop, the image through a shared-memory file (``omni_core.stage.shared_media``),
and the greedy reply still equals transformers' on the same picture."""

from __future__ import annotations

import numpy as np
from PIL import Image
from qwen_helpers import IMAGE_CHAT
from test_qwen_chat_parts import chat, client, png_url, reference_text  # noqa: F401 (fixture)

from omni_core.stage.process import PACK_OFF_LOOP_BYTES
from omni_core.stage.shared_media import SHARE_MIN_BYTES, media_bytes


def test_a_large_image_crosses_shared_memory_and_the_reply_is_transformers(client, hf):  # noqa: F811
    pixels = np.random.default_rng(5).integers(0, 256, (1024, 768, 3), dtype=np.uint8)
    picture = Image.fromarray(pixels)
    assert media_bytes(picture) >= max(PACK_OFF_LOOP_BYTES, SHARE_MIN_BYTES)  # the new path
    content = [
        {"type": "image_url", "image_url": {"url": png_url(picture)}},
        {"type": "text", "text": IMAGE_CHAT[0]["content"][1]["text"]},
    ]
    text, _ = chat(client, content)
    assert text.rstrip("\ufffd") == reference_text(hf, IMAGE_CHAT, images=[picture]) and text
