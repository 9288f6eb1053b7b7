"""Property: random interleavings of add, abort, acknowledged abort, request failure, replica
death, control RPC and shutdown never break "exactly one terminal per request"."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from omni_core import AsyncOmniEngine, EngineDeadError, OmniSettings, PipelineConfig, SamplingParams
from omni_core.plugin.hooks import PluginHost
from omni_core.testing.tiers import examples

PIPELINE = PipelineConfig.from_yaml_text("""
name: chaos
stages:
  - {id: 0, name: a, kind: scripted, replicas: 2, engine_args: {num_tokens: 6, delay_s: 0.001},
     restart: {policy: on-failure, max_restarts: 100, backoff_s: 0}, final_output: true}
  - {id: 1, name: b, kind: scripted, replicas: 2, inputs: [0], engine_args: {num_tokens: 4},
     restart: {policy: on-failure, max_restarts: 100, backoff_s: 0}}
  - {id: 2, name: c, kind: scripted, replicas: 2, inputs: [1], engine_args: {num_tokens: 3, output: whole},
     restart: {policy: on-failure, max_restarts: 100, backoff_s: 0}, final_output: true, final_output_type: image}
""")
BOUND_S = 10.0


class TerminalMachine(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.loop = asyncio.new_event_loop()
        settings_ = OmniSettings(startup_timeout_s=30, shutdown_timeout_s=5)
        self.engine = AsyncOmniEngine(
            PIPELINE,
            settings=settings_,
            plugins=PluginHost.create(settings_, load_entry_points=False),
        )
        self.tasks: dict[str, asyncio.Task] = {}
        self.counter = 0
        self.shut = False

    async def _consume(self, rid: str, params):
        terminals = 0
        after_terminal = 0
        try:
            async for out in self.engine.generate(
                f"p{rid}", request_id=rid, sampling_params=params
            ):
                if terminals:
                    after_terminal += 1
                terminals += out.finished
        except EngineDeadError:
            terminals += 1  # a fatal engine failure is this request's one terminal
        return terminals, after_terminal

    def _pump(self, seconds=0.002):
        self.loop.run_until_complete(asyncio.sleep(seconds))

    @precondition(lambda self: not self.shut)
    @rule(n=st.integers(1, 2), fail=st.sampled_from([None, None, 1, 3]))
    def add(self, n, fail):
        rid = f"r{self.counter}"
        self.counter += 1
        extra = {"scripted": {"fail_after": fail, "stages": ["b"]}} if fail is not None else {}
        params = {"a": SamplingParams(n=n, extra=extra), "b": SamplingParams(extra=extra)}
        self.tasks[rid] = self.loop.create_task(self._consume(rid, params))
        self._pump()

    @precondition(lambda self: not self.shut and self.tasks)
    @rule(data=st.data(), acknowledged=st.booleans())
    def abort(self, data, acknowledged):
        rid = data.draw(st.sampled_from(sorted(self.tasks)))
        if acknowledged:
            result = self.loop.run_until_complete(
                asyncio.wait_for(self.engine.abort_async(rid), BOUND_S)
            )
            assert result.success
            assert sum(o.finished for o in result.outputs) <= 1
        else:
            self.engine.abort(rid)
        self._pump()

    @precondition(lambda self: not self.shut)
    @rule(stage=st.integers(0, 2), replica=st.integers(0, 1))
    def kill_replica(self, stage, replica):
        self.loop.run_until_complete(
            asyncio.wait_for(
                self.engine.collective_rpc("die", kwargs={"replica": replica}, stage_ids=[stage]),
                BOUND_S,
            )
        )
        self._pump(0.01)

    @precondition(lambda self: not self.shut)
    @rule(method=st.sampled_from(["get_state", "pause_scheduler", "resume_scheduler"]))
    def control_rpc(self, method):
        results = self.loop.run_until_complete(
            asyncio.wait_for(self.engine.collective_rpc(method), BOUND_S)
        )
        assert len(results) <= 6
        if method == "pause_scheduler":  # never leave it paused
            self.loop.run_until_complete(self.engine.resume_scheduler())

    @precondition(lambda self: not self.shut)
    @rule()
    def let_it_run(self):
        self._pump(0.02)

    @precondition(lambda self: not self.shut)
    @rule()
    def shutdown(self):
        self.loop.run_until_complete(asyncio.to_thread(self.engine.shutdown))
        self.shut = True

    @precondition(lambda self: self.shut)
    @rule()
    def request_after_shutdown_is_refused(self):
        async def attempt():
            try:
                async for _ in self.engine.generate("late"):
                    pass
            except EngineDeadError:
                return True
            return False

        assert self.loop.run_until_complete(attempt())

    @invariant()
    def engine_alive_unless_shut(self):
        if hasattr(self, "engine"):
            assert self.engine.is_alive() != self.shut

    def teardown(self):
        if not hasattr(self, "engine"):
            return
        try:
            done, pending = (
                self.loop.run_until_complete(
                    asyncio.wait(list(self.tasks.values()), timeout=BOUND_S)
                )
                if self.tasks
                else (set(), set())
            )
            assert not pending, f"{len(pending)} generate() calls hung"
            for rid, task in self.tasks.items():
                terminals, after = task.result()
                assert terminals == 1, f"{rid}: {terminals} terminals"
                assert after == 0, f"{rid}: {after} outputs after its terminal"
            if not self.shut:
                assert self.engine.request_tables() == {"requests": 0, "runs": 0, "bindings": 0}
        finally:
            self.engine.shutdown()
            self.loop.close()


TerminalMachine.TestCase.settings = settings(
    max_examples=examples(25),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_terminal_state_property = TerminalMachine.TestCase
