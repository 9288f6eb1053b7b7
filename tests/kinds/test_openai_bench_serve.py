"""``omni bench serve``'s client half: vLLM's own ``bench serve`` code (random dataset, which
sends ``ignore_eos``) against ``omni serve`` on the tiny thinker, with 0 failed requests on both
endpoints; a run with failed requests is a failed check naming the server and the error."""

from __future__ import annotations

import os

import pytest

from omni_core.bench.orchestration import CheckFailed
from omni_core.bench.serve import MODEL, PIPE, Server, client_args, run_client
from omni_core.config.settings import OmniSettings
from omni_core.models import resolve_model
from tests.serve.conftest import running_server


@pytest.fixture(scope="module")
def omni():
    with running_server(PIPE) as (base, _, _):
        yield Server("omni serve", base, os.getpid())


@pytest.fixture(scope="module")
def model_path() -> str:
    return resolve_model("tiny-thinker", OmniSettings().cache_dir)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_vllm_bench_client_random_dataset_no_failed_request(omni, model_path, endpoint):
    args = client_args(omni.base, model_path, endpoint, 6, 3, 16, 5, 0)
    got = run_client(omni, args)
    assert got["request_throughput"] > 0
    assert got["output_throughput"] > 0
    assert got["cpu_ms_per_request"] > 0
    assert {"median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms"} <= set(got)


def test_failed_requests_fail_the_check(omni, model_path):
    args = client_args(omni.base, model_path, "completions", 2, 1, 16, 4, 0)
    args.served_model_name = "not-" + MODEL  # every request answers 404
    with pytest.raises(CheckFailed, match="omni serve: 2 of 2 requests failed"):
        run_client(omni, args)
