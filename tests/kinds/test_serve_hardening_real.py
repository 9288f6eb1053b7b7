"""Against the real tiny-omni server (thinker and talker on vLLM): each input that used to take a
stage or the server down answers a 4xx, /health stays 200, and the next normal request succeeds
on the same stage processes."""

from __future__ import annotations

import httpx
import pytest

from tests.serve.conftest import running_server

CHAT = {"model": "tiny-omni", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def server():
    with running_server("tiny-omni") as running:
        yield running


def pids(engine) -> set[int]:
    import asyncio

    states = asyncio.run(engine.collective_rpc("get_state", stage_ids=[0, 1]))
    return {s["pid"] for s in states}


TRIGGERS = [
    ("long prompt", {"messages": [{"role": "user", "content": "word " * 700}]}, 400, "max_model_len"),
    ("temperature 2.5e300", {"temperature": 1e300}, 400, "temperature"),
    ("negative temperature", {"temperature": -0.5}, 400, "temperature"),
    ("seed over 64 bits", {"seed": 2**70}, 400, "seed"),
    ("n too large", {"n": 20000}, 400, "n"),
    ("top_p zero", {"top_p": 0}, 400, "top_p"),
    ("text part not a string", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, 400, "messages"),
    ("null content part", {"messages": [{"role": "user", "content": [None]}]}, 400, "messages"),
    ("nested modalities", {"modalities": [["text"]]}, 400, "modalities"),
    ("image part on a text stage", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, 400, "image_url"),
    ("unknown field", {"bogus": 1}, 400, "bogus"),
]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_each_trigger_is_a_4xx_and_the_stages_keep_serving(server, stream):
    base, engine, _ = server
    before = pids(engine)
    with httpx.Client(base_url=base, timeout=120) as h:
        for name, change, status, needle in TRIGGERS:
            r = h.post("/v1/chat/completions", json={**CHAT, **change, "stream": stream})
            assert r.status_code == status, (name, r.text)
            assert needle in r.text, (name, r.text)
            assert h.get("/health").status_code == 200, name
        deep = b'{"a":' * 2000 + b"1" + b"}" * 2000
        json_type = {"content-type": "application/json"}
        body = h.post("/v1/chat/completions", content=deep, headers=json_type)
        assert body.status_code == 400 and "nests deeper" in body.text
        ok = h.post("/v1/chat/completions", json={**CHAT, "stream": stream})
        assert ok.status_code == 200
    assert pids(engine) == before  # no stage process was replaced
    assert engine.num_active_requests == 0
