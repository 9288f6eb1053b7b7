"""Process replicas: the engine time their worker reports (``step()`` and requests handed to the
engine, what the vllm benchmark subtracts from time to first audio, not the waits between
steps), and what an undecodable frame does."""

from __future__ import annotations

from omni_core.stage.wire import HEADER
from tests.helpers import collect


async def test_process_replica_reports_step_time_not_waiting(make_engine):
    engine = make_engine("""
name: proc
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 20, delay_s: 0.01, process: true}, final_output: true}
""")
    client = engine._runtime.stages.pools[0].clients[0]
    assert client.compute_s == 0.0
    outs = await collect(engine, "x")
    assert len(outs) == 20
    # 20 steps 10 ms apart: ≥ 0.19 s of wall time, almost none of it inside step()
    assert 0.0 < client.compute_s < 0.05


async def test_an_undecodable_frame_kills_the_replica_with_a_reason_that_says_so(make_engine):
    engine = make_engine("""
name: proc
stages:
  - {id: 0, name: thinker, kind: scripted, engine_args: {num_tokens: 200, delay_s: 0.01, process: true}, final_output: true}
""")
    client = engine._runtime.stages.pools[0].clients[0]
    gen = engine.generate("x")
    await gen.__anext__()
    reader = client._transport.get_protocol()
    loop = engine._runtime.orchestrator.loop
    loop.call_soon_threadsafe(reader.data_received, HEADER.pack(3) + b"xyz")  # not a frame
    rest = [o async for o in gen]
    assert rest[-1].finished and rest[-1].error.type == "ReplicaDeadError"
    assert "undecodable frame" in rest[-1].error.message
    assert engine.is_alive()
