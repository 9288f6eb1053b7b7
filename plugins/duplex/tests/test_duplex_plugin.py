"""Registration through the entry point, engine-kind selection, the import boundary, the codec."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
from duplex_helpers import PIPE, SECTION, pipeline, register
from omni_core import AsyncOmniEngine, PluginHost
from omni_core.config.pipeline import PipelineConfig
from omni_core.errors import ConfigError

from omni_duplex import protocol as P
from omni_duplex import realtime
from omni_duplex.errors import DuplexError

CORE = Path(__import__("omni_core").__file__).parent


def test_core_carries_no_duplex_vocabulary_and_imports_none_of_it():
    hits = [
        str(p.relative_to(CORE))
        for p in CORE.rglob("*.py")
        if "duplex" in p.read_text(encoding="utf-8").lower()
    ]
    assert hits == []
    probe = (
        "import sys, omni_core\n"
        "from omni_core import AsyncOmniEngine, PluginHost, OmniSettings\n"
        "import omni_core.orchestrator.turn, omni_core.engine.factory, omni_core.serve.app\n"
        "PluginHost.create(OmniSettings(), load_entry_points=False).engine_kinds()\n"
        "print([m for m in sys.modules if 'duplex' in m])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr


def test_installed_entry_point_shows_in_plugins_list_and_loads_cheaply():
    probe = (
        "import sys\nfrom omni_core.cli import main\ntry:\n    main(['plugins', 'list'])\n"
        "except SystemExit:\n    pass\n"
        "print('MODS', 'omni_duplex.plugin' in sys.modules, 'numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "omni-duplex" in out.stdout and "duplex" in out.stdout
    assert "MODS True False" in out.stdout


def test_engine_kind_section_model_and_cli_group_come_from_the_hooks(
    fake_entry_points, omni_settings
):
    register(fake_entry_points)
    host = PluginHost.create(omni_settings)
    assert "duplex" in host.engine_kinds() and "duplex" in host.config_sections()
    assert [g.name for _, g in host.cli_groups()] == ["duplex"]
    assert [r.name for r in host.server_routes()] == ["duplex-realtime"]
    assert "tiny-omni-duplex" in host.pipelines()
    with pytest.raises(ConfigError, match="selects engine 'duplex'"):
        AsyncOmniEngine(pipeline(), settings=omni_settings, plugins=host)


def test_unknown_model_and_bad_section_are_config_errors(make_engine, fake_entry_points):
    register(fake_entry_points)
    with pytest.raises(ConfigError, match="unknown duplex model 'nope'"):
        make_engine(pipeline(section="{model: nope}"))
    with pytest.raises(ConfigError, match="max_sessions"):
        make_engine(pipeline(section="{max_sessions: 0}"))
    no_text = PIPE.replace("SECTION", SECTION).replace(
        "final_output_type: text", "final_output_type: tokens"
    )
    with pytest.raises(ConfigError, match="needs a final stage"):
        make_engine(PipelineConfig.from_yaml_text(no_text))


def test_realtime_client_events_become_commands():
    audio = base64.b64encode(b"\x01\x00\x02\x00").decode()
    [append] = realtime.commands_from_client(
        {"type": "input_audio_buffer.append", "audio": audio, "event_id": "e1"}
    )
    assert append == P.AppendAudio(audio=b"\x01\x00\x02\x00", sample_rate_hz=24000, event_id="e1")
    [update] = realtime.commands_from_client(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["text"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 300},
                    }
                },
            },
        }
    )
    assert update.session == {
        "output_modalities": ["text"],
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 300},
    }
    [text] = realtime.commands_from_client(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "hi"}],
            },
        }
    )
    assert text == P.AppendText(text="hi", commit=True)  # admitted or refused as one
    for bad, code in [
        ({"type": "nope"}, "unknown_event"),
        ({"type": "input_audio_buffer.append", "audio": "%%%"}, "invalid_audio"),
        (
            {"type": "session.update", "session": {"turn_detection": {"type": "semantic_vad"}}},
            "unsupported_turn_detection",
        ),
        (
            {
                "type": "session.update",
                "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            },
            "invalid_session_config",
        ),
    ]:
        with pytest.raises(DuplexError) as err:
            realtime.commands_from_client(bad)
        assert err.value.code == code


def test_server_events_use_realtime_names_and_base64_audio():
    delta = P.DuplexEvent(
        P.AUDIO_DELTA, "s", 2, {"response_id": "r", "item_id": "i", "audio": b"\x00\x01"}, 0.0
    )
    wire = realtime.to_server_event(delta)
    assert wire["type"] == "response.output_audio.delta" and wire["epoch"] == 2
    assert base64.b64decode(wire["delta"]) == b"\x00\x01" and wire["response_id"] == "r"
    err = realtime.to_server_event(
        P.DuplexEvent(
            P.ERROR,
            "s",
            0,
            {"code": "input_backpressure", "message": "m", "retryable": True, "event_id": "e"},
            0.0,
        )
    )
    assert err["error"] == {
        "type": "rate_limit_error",
        "code": "input_backpressure",
        "message": "m",
        "event_id": "e",
        "retryable": True,
    }
    done = realtime.to_server_event(
        P.DuplexEvent(
            P.RESPONSE_DONE,
            "s",
            0,
            {
                "response_id": "r",
                "item_id": "i",
                "status": "cancelled",
                "reason": "turn_detected",
                "text": "ab",
                "audio_ms": 10,
            },
            0.0,
        )
    )
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["output"][0]["content"][0]["transcript"] == "ab"
