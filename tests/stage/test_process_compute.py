"""A process replica reports the engine time its worker spent in ``step()`` and ``add`` (what the vllm
benchmark subtracts from time to first audio), not the time it waited between steps."""

from __future__ import annotations

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
