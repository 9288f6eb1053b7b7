"""On a duplex server the OpenAI request routes say where the model is served (not a 500)."""

from __future__ import annotations

import httpx
from omni_core.serve.app import create_app
from omni_core.serve.metrics import OmniMetrics


async def test_chat_completions_on_a_duplex_server_points_to_realtime(duplex):
    app = create_app(duplex(), OmniMetrics())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        reply = await client.post(
            "/v1/chat/completions",
            json={"model": "duplex-scripted", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "unsupported_endpoint"
    assert "/v1/realtime" in error["message"] and "'duplex'" in error["message"]
