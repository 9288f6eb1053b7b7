"""A request refused before any stage ran (a plugin's ``RequestRejected``, issue 36 item 3): the
refusal is printed as such, with no output counted for its error terminal and no empty timing
table; exit 2 (a 429, over a quota, is exit 1: retry later)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from omni_core import PLUGIN_API_VERSION, RequestRejected, hookimpl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-chain.yaml"


def gate(status: int) -> types.ModuleType:
    module = types.ModuleType("fake_gate")
    module.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION

    @hookimpl
    def omni_admit_request(run_id):
        raise RequestRejected(status, "not on the guest list")

    module.omni_admit_request = omni_admit_request
    return module


@pytest.mark.parametrize(("status", "code"), [(403, 2), (429, 1)])
def test_a_refused_request_prints_the_refusal_not_a_summary(
    run_cli, fake_entry_points, tmp_path, status, code
):
    fake_entry_points.add("gate", gate(status))
    got, out, err = run_cli("run", str(EXAMPLE), "-o", str(tmp_path))
    assert got == code
    assert err == "error: not on the guest list\n"
    assert out.splitlines() == [f"the request was refused ({status})", "finish_reason: error"]
    assert "outputs" not in out and "per-stage timing" not in out
    assert not list(tmp_path.iterdir())  # no media written


def test_an_ordinary_run_still_counts_its_outputs(run_cli, tmp_path):
    code, out, err = run_cli("run", str(EXAMPLE), "-o", str(tmp_path), "--max-tokens", "2")
    assert code == 0, err
    assert "[vocoder] audio: 2 outputs, 2 tokens" in out and "per-stage timing" in out
