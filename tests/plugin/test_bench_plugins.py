"""``omni bench plugins``: its three setups, the streamed stages it reports and its checks (the
figures themselves are ratios printed by the bench, never asserted)."""

from __future__ import annotations

import pytest

from omni_core.bench import plugins as bench
from omni_core.bench.orchestration import TOKENS, CheckFailed

SETUPS = ("none", "installed", "everywhere")


@pytest.fixture
def installed(fake_entry_points):
    fake_entry_points.add("cfg", pytest.importorskip("omni_cfg.plugin"), distribution="omni-cfg")
    fake_entry_points.add(
        "duplex", pytest.importorskip("omni_duplex.plugin"), distribution="omni-duplex"
    )
    return fake_entry_points


def test_installed_plugins_leave_the_tiny_omni_shape_streaming_the_same_stages(installed):
    setups = bench.hosts()
    assert bench.installed_plugins(setups["installed"]) == ["cfg", "duplex"]
    assert bench.installed_plugins(setups["none"]) == []
    rates, streamed = bench.measure_case(
        bench.tiny_omni_shape(), 2 * TOKENS, setups, rounds=1, seconds=0.02
    )
    # the talker (1) answers final-only in every setup: even taking part everywhere, omni-cfg's
    # output hooks live on its per-pipeline object (API 3), made only for a guided pipeline (with
    # API 2's module-level interceptor, "everywhere" made every stage stream)
    assert streamed == {"none": {0, 2}, "installed": {0, 2}, "everywhere": {0, 2}}
    assert set(rates) == set(SETUPS)
    assert all(wall > 0 and cpu > 0 for wall, cpu in rates.values())


def measured(streamed_installed: set[int]):
    rates = {"none": (100.0, 50.0), "installed": (99.0, 49.0), "everywhere": (40.0, 20.0)}
    streamed = {"none": {0, 2}, "installed": streamed_installed, "everywhere": {0, 1, 2}}
    return lambda *args, **kwargs: (rates, streamed)


def test_the_rows_name_the_setups_the_plugins_and_the_streamed_stages(installed, monkeypatch):
    monkeypatch.setattr(bench, "measure_case", measured({0, 2}))
    rows = bench.bench_plugins(quick=True)
    by_figure = {row.figure: row for row in rows}
    assert by_figure["requests/s, installed plugins (cfg, duplex)"].ratio == pytest.approx(0.99)
    assert by_figure["requests/CPU s, every plugin in every pipeline"].ratio == pytest.approx(0.4)
    assert "streamed stages: none {0, 2}, installed {0, 2}, everywhere {0, 1, 2}" in by_figure


def test_a_changed_streamed_stage_set_fails_the_bench(installed, monkeypatch):
    monkeypatch.setattr(bench, "measure_case", measured({0, 1, 2}))
    with pytest.raises(
        CheckFailed,
        match=r"installed plugins \(cfg, duplex\) change the streamed stages: \{0, 1, 2\} vs",
    ):
        bench.bench_plugins(quick=True)
