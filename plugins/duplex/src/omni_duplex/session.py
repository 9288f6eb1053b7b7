"""``SessionRunner``: one session, owned by one task on the orchestrator loop.

Single writer: every change to the session happens in :meth:`SessionRunner.run`, one mailbox item
at a time — client commands (in caller order), outputs of the session's stage requests, and close
requests. A cancelled response ends with its ``response.done`` (status ``cancelled``) *before*
the epoch advances; outputs of the old response are dropped afterwards (they no longer match the
active response), so nothing of an old epoch is emitted after its terminal.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_duplex import protocol as P
from omni_duplex import tools
from omni_duplex.errors import DuplexError
from omni_duplex.history import truncate
from omni_duplex.lease import Lease
from omni_duplex.model import ResponseContext, UserTurn
from omni_duplex.session_shape import check_voice

if TYPE_CHECKING:
    from omni_core import OmniRequestOutput

    from omni_duplex.config import SessionConfig
    from omni_duplex.manager import SessionManager
    from omni_duplex.vad import Vad

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Output:
    output: OmniRequestOutput


@dataclass(slots=True)
class _Close:
    rpc_key: tuple[str, str] | None = None


@dataclass(slots=True)
class _Response:
    id: str
    run_id: str
    item_id: str
    epoch: int
    text: list[str] = field(default_factory=list)
    audio_bytes: int = 0
    done: bool = False
    tools: tools.ResponseTools | None = None  # with session tools (omni_duplex.tools)
    turns: list[str] = field(default_factory=list)  # the user items it answers


class _Sink:
    """Stands in for a caller stream: the orchestrator delivers the session's stage outputs here
    (on its own loop) and they join the mailbox behind earlier commands."""

    __slots__ = ("loop", "runner")

    def __init__(self, runner: SessionRunner) -> None:
        self.runner = runner
        self.loop = runner.manager.orch.loop

    def push(self, item: Any) -> None:
        if self.runner.state != "closed":
            self.runner.mailbox.put_nowait(_Output(item))


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


class SessionRunner:
    def __init__(
        self, manager: SessionManager, session_id: str, config: SessionConfig, stream: Any
    ) -> None:
        section = manager.section
        self.manager = manager
        self.orch = manager.orch
        self.model = manager.model
        self.id = session_id
        self.client: str | None = None  # the peer that opened it (max_sessions_per_client)
        self.config = config
        self.stream = stream
        self.state = "open"  # open -> closing -> closed
        self.close_terminal = P.SESSION_CLOSED
        self.close_reason = ""
        self.cleanup_pending = False
        self.terminal_sent = False
        self.epoch = 0
        now = time.monotonic()
        self.lease = Lease(section.idle_ttl_s, section.disconnect_grace_s, now)
        self.mailbox: asyncio.Queue[Any] = asyncio.Queue()
        self.sink = _Sink(self)
        self.pending_bytes = 0  # admitted appends not yet applied + uncommitted audio
        self.queued_commits = 0
        self.buffer: list[Any] = []  # float32 arrays at the model's input rate
        self.buffer_bytes = 0
        self.text_parts: list[str] = []
        self.text_bytes = 0  # of text_parts (counted in pending_bytes)
        self.turns: list[UserTurn] = []  # committed, not yet answered
        self.history: deque[dict[str, Any]] = deque()  # bounded: max_history_turns/_bytes
        self.history_bytes = 0
        self.clock_ms = 0.0  # input audio received so far
        self.speech_item: str | None = None
        self.vad: Vad | None = None
        self.response: _Response | None = None
        self.live_runs: set[str] = set()
        self.submissions: dict[str, list[int]] = {}  # run id -> stage ids submitted
        self._runs = 0
        # cancelled responses' runs -> the user items they answered: a refusal arriving after
        # the cancel still takes those items out (bounded: the newest few)
        self.cancelled_turns: deque[tuple[str, list[str]]] = deque(maxlen=8)
        self.journal: deque[P.DuplexEvent] | None = None  # set while detached
        self.task: asyncio.Task[Any] | None = None
        self.config = self._resolved(config)
        self.vad = self._new_vad()

    # --- emission -----------------------------------------------------------------------------
    def emit(self, kind: str, **data: Any) -> None:
        if self.terminal_sent:
            return
        event = P.DuplexEvent(kind, self.id, self.epoch, data, time.monotonic())
        if event.terminal:
            self.terminal_sent = True
        if self.journal is not None:
            if not event.terminal:
                self.journal.append(event)
                return
            # ended while detached: the last stream gets what it missed, then the terminal
            for missed in self.journal:
                self.orch.port.emit(self.stream, missed)
            self.journal = None
        self.orch.port.emit(self.stream, event)

    def error(
        self, code: str, message: str, *, retryable: bool = False, event_id: Any = None
    ) -> None:
        self.emit(P.ERROR, code=code, message=message, retryable=retryable, event_id=event_id)

    def attach(self, stream: Any) -> None:
        """A resumed transport: events missed while detached are replayed to it first."""
        self.stream = stream
        journal, self.journal = self.journal, None
        for event in journal or ():
            self.orch.port.emit(stream, event)

    def detach(self) -> None:
        if self.journal is None:
            self.journal = deque(maxlen=self.manager.section.detached_event_buffer)

    # --- the worker ---------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            item = await self.mailbox.get()
            try:
                if isinstance(item, _Close):
                    if await self._close(item):
                        return
                elif self.state != "open":
                    continue  # closing: commands and outputs are dropped
                elif isinstance(item, _Output):
                    await self._on_output(item.output)
                else:
                    await self._apply(item)
            except DuplexError as exc:
                event_id = getattr(item, "event_id", None)
                self.error(exc.code, exc.message, retryable=exc.retryable, event_id=event_id)
            except Exception as exc:
                logger.exception("duplex session %s failed on %s", self.id, type(item).__name__)
                self.error("internal_error", f"{type(exc).__name__}: {exc}")

    async def _apply(self, cmd: P.Command) -> None:
        if isinstance(cmd, P.AppendAudio):
            self.pending_bytes -= len(cmd.audio)
            await self._append_audio(cmd)
        elif isinstance(cmd, P.AppendText):
            self.text_parts.append(cmd.text)
            self.text_bytes += len(cmd.text.encode("utf-8", "surrogatepass"))
            if cmd.commit:
                self.queued_commits -= 1
                await self._commit(False, cmd.event_id)
        elif isinstance(cmd, P.Commit):
            self.queued_commits -= 1
            await self._commit(cmd.create_response, cmd.event_id)
        elif isinstance(cmd, P.CreateResponse):
            await self._create_response(cmd.event_id)
        elif isinstance(cmd, P.CancelResponse):
            if self.response is None:
                raise DuplexError("response_cancel_not_active", "no response is in progress")
            await self._cancel("client_cancelled")
        elif isinstance(cmd, P.ClearInput):
            self._clear_buffer()
            self._clear_text()
            self.vad, self.speech_item = self._new_vad(), None
            self.emit(P.INPUT_CLEARED)
        elif isinstance(cmd, P.TruncateItem):
            truncate(self, cmd)
        elif isinstance(cmd, P.ToolOutput):
            tools.add_output(self, cmd)
        elif isinstance(cmd, P.UpdateSession):
            config = self._resolved(self.config.updated(cmd.session))
            tools.check_model(self.model, config)
            check_voice(self.model, config)
            vad = self._new_vad(config)  # a VAD that cannot be made leaves the session as it was
            self.config, self.vad, self.speech_item = config, vad, None
            self.emit(P.SESSION_UPDATED, session=self.config.public())
        else:
            raise DuplexError("invalid_command", f"unknown command {type(cmd).__name__}")

    # --- input --------------------------------------------------------------------------------
    def _resolved(self, config: SessionConfig) -> SessionConfig:
        """``config`` with the pipeline's default VAD where the session chose none."""
        td = config.turn_detection
        if td is None or td.vad is not None:
            return config
        td = td.model_copy(update={"vad": self.manager.section.vad})
        return config.model_copy(update={"turn_detection": td})

    def _new_vad(self, config: SessionConfig | None = None) -> Vad | None:
        """A fresh detector for ``config`` (default: the session's), clocked from now."""
        td = (config or self.config).turn_detection
        if td is None:
            return None
        from omni_duplex.vad import make_vad

        assert td.vad is not None  # resolved
        return make_vad(
            td.vad,
            self.model.input_sample_rate,
            threshold=td.threshold,
            min_speech_duration_ms=td.min_speech_duration_ms,
            silence_duration_ms=td.silence_duration_ms,
            start_ms=round(self.clock_ms),
        )

    async def _append_audio(self, cmd: P.AppendAudio) -> None:
        from omni_duplex.audio import decode_pcm16, duration_ms, resample

        samples = resample(
            decode_pcm16(cmd.audio), cmd.sample_rate_hz, self.model.input_sample_rate
        )
        self.buffer.append(samples)
        self.buffer_bytes += 2 * samples.size
        self.pending_bytes += 2 * samples.size
        self.clock_ms += duration_ms(samples.size, self.model.input_sample_rate)
        if self.vad is None:
            return
        td = self.config.turn_detection
        assert td is not None
        for event in self.vad.feed(samples):
            if event.kind == "started":
                self.speech_item = _new_id("item")
                self.emit(P.SPEECH_STARTED, audio_start_ms=event.audio_ms, item_id=self.speech_item)
                if self.response is not None and td.interrupt_response:
                    await self._cancel("turn_detected")
            else:
                self.emit(P.SPEECH_STOPPED, audio_end_ms=event.audio_ms, item_id=self.speech_item)
                if len(self.turns) + self.queued_commits >= self.manager.section.max_pending_turns:
                    self.error("input_backpressure", "too many committed turns", retryable=True)
                    continue
                await self._commit(td.create_response, None, self.speech_item)
        if not self.vad.speaking:  # keep only the prefix padding before speech starts
            self._trim(td.prefix_padding_ms)

    def _trim(self, keep_ms: int) -> None:
        import numpy as np

        keep = self.model.input_sample_rate * keep_ms // 1000
        if self.buffer_bytes // 2 <= keep:
            return
        tail = np.concatenate(self.buffer)[-keep:] if keep else np.zeros(0, dtype=np.float32)
        self.pending_bytes -= self.buffer_bytes - 2 * tail.size
        self.buffer, self.buffer_bytes = [tail], 2 * tail.size

    def _clear_buffer(self) -> None:
        self.pending_bytes -= self.buffer_bytes
        self.buffer, self.buffer_bytes = [], 0

    def _clear_text(self) -> None:
        self.pending_bytes -= self.text_bytes
        self.text_parts, self.text_bytes = [], 0

    def _remember(self, role: str, item_id: str, text: str, **more: Any) -> None:
        """Add to the history; past ``max_history_turns``/``max_history_bytes`` the oldest items
        are dropped (each with a ``conversation.item.deleted`` event). ``more``: ``audio`` of a
        spoken turn (kept when the model asks), ``audio_ms`` of a reply."""
        section = self.manager.section
        item = {"role": role, "item_id": item_id, "text": text}
        item.update({k: v for k, v in more.items() if v is not None})
        self.history.append(item)
        self.history_bytes += len(text.encode("utf-8", "surrogatepass"))
        while self.history and (
            len(self.history) > section.max_history_turns
            or self.history_bytes > section.max_history_bytes
        ):
            old = self.history.popleft()
            self.history_bytes -= len(old["text"].encode("utf-8", "surrogatepass"))
            self.emit(P.ITEM_DELETED, item_id=old["item_id"], reason="history_limit")

    def _forget(self, item_ids: list[str], reason: str) -> None:
        """Drop these items from the history (each with a ``conversation.item.deleted``)."""
        gone = set(item_ids)
        for item in [h for h in self.history if h["item_id"] in gone]:
            self.history.remove(item)
            self.history_bytes -= len(item["text"].encode("utf-8", "surrogatepass"))
            self.emit(P.ITEM_DELETED, item_id=item["item_id"], reason=reason)

    async def _commit(
        self, create_response: bool, event_id: Any, item_id: str | None = None
    ) -> None:
        import numpy as np

        from omni_duplex.audio import duration_ms

        if not self.buffer_bytes and not self.text_parts:
            raise DuplexError("input_audio_buffer_commit_empty", "nothing to commit")
        audio = np.concatenate(self.buffer) if self.buffer_bytes else None
        turn = UserTurn(
            item_id or _new_id("item"),
            audio,
            " ".join(self.text_parts),
            duration_ms(audio.size, self.model.input_sample_rate) if audio is not None else 0.0,
        )
        self._clear_buffer()
        self._clear_text()
        self.turns.append(turn)
        self.emit(P.INPUT_COMMITTED, item_id=turn.item_id, audio_ms=round(turn.audio_ms))
        if create_response:
            await self._create_response(event_id)

    # --- responses ----------------------------------------------------------------------------
    async def _create_response(self, event_id: Any) -> None:
        if self.response is not None:
            raise DuplexError(
                "conversation_already_has_active_response", "a response is already in progress"
            )
        context = ResponseContext(
            self.config,
            list(self.turns),
            list(self.history),
            dict(self.manager.default_params),
            {sid: s.name for sid, s in self.orch.port.pipeline.stages.items()},
            self.id,
        )
        try:
            if self.model.plans_off_loop:
                plan = await asyncio.to_thread(self.model.plan_response, context)
            else:
                plan = self.model.plan_response(context)
        except DuplexError as exc:
            if exc.code == "input_rejected":  # these turns would be refused with every later one
                for turn in self.turns:
                    self.emit(P.ITEM_DELETED, item_id=turn.item_id, reason="input_rejected")
                self.turns.clear()
            raise
        response_tools = await tools.prepare(self, plan)
        answered = [turn.item_id for turn in self.turns]
        for turn in self.turns:
            audio = turn.audio if self.model.keeps_audio else None
            self._remember("user", turn.item_id, turn.text, audio=audio)
        self.turns.clear()
        self._runs += 1
        epoch = self.epoch
        resp = _Response(
            _new_id("resp"), f"{self.id}.e{epoch}.r{self._runs}", _new_id("item"), epoch
        )
        resp.tools, resp.turns = response_tools, answered
        self.response = resp
        self.emit(P.RESPONSE_CREATED, response_id=resp.id, item_id=resp.item_id)
        try:
            await self.orch.start_session_run(self, resp.run_id, plan)
        except DuplexError as exc:
            if self.response is resp:
                self.error(exc.code, exc.message, retryable=exc.retryable, event_id=event_id)
                self._finish(resp, "failed", exc.code)
            return
        if self.epoch != epoch or self.state != "open":  # re-check after the await
            return

    async def _on_output(self, out: OmniRequestOutput) -> None:
        resp = self.response
        if resp is None or out.request_id != resp.run_id or resp.epoch != self.epoch:
            if out.error is not None and 400 <= out.error.status_code < 500:
                for run_id, turns in self.cancelled_turns:  # refused, though cancelled
                    if run_id == out.request_id:
                        self._forget(turns, "input_rejected")
            return  # a cancelled or finished response's output: dropped
        if out.error is not None:
            refused = 400 <= out.error.status_code < 500  # the stage refused this input
            self.error(
                "input_rejected" if refused else "stage_failed",
                f"{out.stage_name}: {out.error.message}",
                retryable=out.error.retryable,
            )
            if refused:  # it would be refused again in every later turn's conversation
                self._forget(resp.turns, "input_rejected")
            self._finish(resp, "failed", out.error.type)
            return
        try:
            await self._project(resp, out)
        except Exception as exc:  # e.g. vLLM's tool-call parser: this reply fails, alone
            code = "tool_call_error" if resp.tools is not None else "output_error"
            logger.exception("session %s: %s", self.id, code)
            self.error(code, f"the reply's output could not be read: {exc}")
            self._finish(resp, "failed", code)
            self.epoch += 1
            if not out.finished and resp.run_id in self.live_runs:
                await self.orch.abort_session_runs([resp.run_id])
            return
        if out.finished:
            reason = out.finish_reason or "stop"
            status = "cancelled" if reason in ("abort", "cancelled", "timeout") else "completed"
            self._finish(resp, status, reason)

    async def _project(self, resp: _Response, out: OmniRequestOutput) -> None:
        """One output's text and audio deltas as events (a reply with tools: through its parser)."""
        for delta in self.model.project(out):
            if delta.kind == "text" and resp.tools is not None:
                await tools.on_text(self, resp, delta.value, out.token_ids)
            elif delta.kind == "text":
                resp.text.append(delta.value)
                self.emit(
                    P.TEXT_DELTA, response_id=resp.id, item_id=resp.item_id, delta=delta.value
                )
            elif delta.kind == "audio":
                resp.audio_bytes += len(delta.value)
                self.emit(
                    P.AUDIO_DELTA, response_id=resp.id, item_id=resp.item_id, audio=delta.value
                )
        if out.finished and resp.tools is not None:
            await tools.flush(self, resp)

    def _finish(self, resp: _Response, status: str, reason: str) -> None:
        if resp.done:
            return
        resp.done = True
        if self.response is resp:
            self.response = None
        text = "".join(resp.text)
        audio_ms = round(resp.audio_bytes / 2 / 24)  # pcm16 at 24 kHz
        calls = tools.close_calls(self, resp, status)
        self.emit(
            P.RESPONSE_DONE,
            response_id=resp.id,
            item_id=resp.item_id,
            status=status,
            reason=reason,
            text=text,
            audio_ms=audio_ms,
            calls=calls,
        )
        # a cancelled or failed response that said nothing leaves no item (no empty replies
        # filling the history); a completed one is a reply, even empty
        if text or audio_ms or (status == "completed" and not calls):
            self._remember("assistant", resp.item_id, text, audio_ms=audio_ms)
        tools.remember_calls(self, resp)
        self.lease.touch(time.monotonic())
        self.manager.schedule(self)

    async def _cancel(self, reason: str) -> None:
        """Cancelled terminal first, then the epoch advances, then the stage requests abort."""
        resp = self.response
        assert resp is not None
        self._finish(resp, "cancelled", reason)
        self.cancelled_turns.append((resp.run_id, resp.turns))
        self.epoch += 1
        if resp.run_id in self.live_runs and not await self.orch.abort_session_runs([resp.run_id]):
            self.error("cancel_failed", "the stage requests could not be aborted", retryable=True)

    # --- close --------------------------------------------------------------------------------
    async def _close(self, item: _Close) -> bool:
        """Cancel, clean up the stage requests, then emit the terminal. False: retry later."""
        if self.response is not None:
            self._finish(self.response, "cancelled", self.close_reason)
            self.epoch += 1
        self._clear_buffer()
        self._clear_text()
        self.turns.clear()
        ok = True
        if self.live_runs:
            ok = await self.orch.abort_session_runs(sorted(self.live_runs))
        if not ok or self.live_runs:
            logger.warning("duplex session %s: stage cleanup failed; retrying", self.id)
            self.manager.defer_cleanup(self)
            self.manager.reply_ok(item.rpc_key, self)
            return False
        self.state = "closed"
        self.emit(self.close_terminal, reason=self.close_reason)
        self.manager.finalize(self)
        self.manager.reply_ok(item.rpc_key, self)
        return True
