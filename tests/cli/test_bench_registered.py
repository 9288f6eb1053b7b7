"""``omni bench NAME`` runs benchmarks that plugins register through ``omni_register_benchmarks``."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from omni_core import hookimpl
from omni_core.bench.orchestration import CheckFailed, Row
from omni_core.cli.app import build_app
from omni_core.plugin.types import Benchmark

CALLS: list[bool] = []


def toy(quick: bool) -> list[Row]:
    CALLS.append(quick)
    return [
        Row("toy", "base", "toy baseline", 2.0, "ms"),
        Row("toy", "case", "toy figure", 3.0, "ms", 2.0, "toy baseline"),
    ]


def broken(quick: bool) -> list[Row]:
    raise CheckFailed("toy check failed")


class BenchPlugin:
    OMNI_PLUGIN_API_VERSION = 2

    def __init__(self, *benchmarks: Benchmark) -> None:
        self.benchmarks = benchmarks

    @hookimpl
    def omni_register_benchmarks(self):
        return list(self.benchmarks)


@pytest.fixture
def bench(fake_entry_points, omni_settings):
    def run(*benchmarks: Benchmark, args: tuple[str, ...]):
        fake_entry_points.add("bench-plugin", BenchPlugin(*benchmarks))
        return CliRunner().invoke(build_app(), ["bench", *args])

    CALLS.clear()
    return run


def test_a_registered_benchmark_runs_when_named_with_its_baseline(bench):
    result = bench(Benchmark("toy", toy), Benchmark("broken", broken), args=("toy", "--quick"))
    assert result.exit_code == 0, result.output
    assert CALLS == [True]
    assert "toy figure" in result.output and "1.50x" in result.output


def test_a_failing_registered_benchmark_exits_1(bench):
    result = bench(Benchmark("broken", broken), args=("broken", "--quick"))
    assert result.exit_code == 1
    assert "bench broken failed: CheckFailed: toy check failed" in result.output


def test_unknown_names_list_registered_benchmarks(bench):
    result = bench(Benchmark("toy", toy), args=("nope",))
    assert result.exit_code != 0 and CALLS == []
    assert "'toy'" in result.output and "'nope'" in result.output


def test_a_registered_benchmark_may_not_shadow_a_built_in(bench):
    result = bench(Benchmark("hop", toy), args=("hop-not-here",))
    assert result.exit_code != 0 and CALLS == []
    assert "shadow" in result.output and "hop" in result.output
