"""The public names of stage-kind and engine-kind authors (the manifest's extender tier,
:mod:`omni_core.public`), imported lazily: stage clients (in-process, pushing, in a process of
their own), the torch kind's engine API, resumable vLLM requests, the loop inbox, the data
types of hidden states and media, tiny-model helpers, and the bases of an engine kind::

    from omni_core.extend import StageContext, TorchStageEngine, process_client

Embedders' names come from ``omni_core``, hook authors' from ``omni_core.plugin``. Importing
this module imports none of the names (no torch, no vLLM) until one is used.
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the lazy re-exports, for type checkers)
from __future__ import annotations

from typing import TYPE_CHECKING

from omni_core.public import lazy_exports, names_of

if TYPE_CHECKING:
    from omni_core.chat import (
        ChatOptions,
    )
    from omni_core.engine.base import (
        OmniEngineBase,
    )
    from omni_core.engine.channel import (
        RequestStream,
    )
    from omni_core.kinds.torch_kind import (
        TorchArgs,
        TorchStageEngine,
        default_plane,
        process_client,
        resolve_model,
        stage_model,
    )
    from omni_core.kinds.vllm_session import (
        PromptTooLongError,
        ResumableSession,
        build_engine,
        hidden_state_capture,
        refusal,
        stop_now_processor,
    )
    from omni_core.media import (
        AUDIO_OPTIONS,
        IMAGE_OPTIONS,
        AudioChunk,
        Image,
    )
    from omni_core.messages import (
        EngineMessage,
    )
    from omni_core.models.tiny import (
        packaged_checksums,
        train_qwen2_bpe,
    )
    from omni_core.orchestrator.base import (
        OrchestratorBase,
    )
    from omni_core.orchestrator.turn import (
        Orchestrator,
    )
    from omni_core.outputs import (
        HiddenStates,
    )
    from omni_core.serve.errors import (
        ApiError,
    )
    from omni_core.serve.tools import (
        NamedToolChoice,
        ToolCalling,
        ToolDef,
        check_tools,
        forced_schema,
        load_parser,
    )
    from omni_core.stage.client import (
        OutputSink,
        PushingStageClient,
        StageClient,
        StageContext,
        StageRequest,
    )
    from omni_core.stage.inbox import (
        LoopInbox,
        Turn,
    )
    from omni_core.stage.local import (
        LocalStageClient,
    )
    from omni_core.stage.process import (
        ProcessStageClient,
    )
    from omni_core.stage.worker import (
        WorkerEngine,
        error_output,
    )


__all__ = list(names_of(__name__))

__getattr__, __dir__ = lazy_exports(__name__, globals())
