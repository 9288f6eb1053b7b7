"""A ``diffusers`` stage's image size limits (``engine_args.max_side``/``max_pixels``): the
stage's own size is checked when the pipeline is read, a request's at admission (the plugin's
``omni_admit_request``, before anything is allocated) with one 400 naming the field and the
limit, and again in the replica."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omni_qwen_image.kind import DEFAULT_MAX_PIXELS, DiffusersArgs, checked_options
from omni_qwen_image.plugin import omni_admit_request
from pydantic import ValidationError

from omni_core.errors import RequestError, RequestRejected
from omni_core.sampling import SamplingParams

SMALL = DiffusersArgs(height=32, width=32)


def test_the_default_cap_is_1024_squared_and_bounds_the_stages_own_size():
    assert DiffusersArgs().max_pixels == DEFAULT_MAX_PIXELS == 1024 * 1024
    DiffusersArgs(height=1024, width=1024)
    with pytest.raises(ValidationError, match="1328x1328 = 1763584 pixels, over max_pixels"):
        DiffusersArgs(height=1328, width=1328)
    DiffusersArgs(height=1328, width=1328, max_pixels=1328 * 1328)  # the GPU recipe raises it
    with pytest.raises(ValidationError, match="a side over max_side=512"):
        DiffusersArgs(height=32, width=1024, max_side=512)
    with pytest.raises(ValidationError, match="max_side"):
        DiffusersArgs(max_side=8192)  # 4096 is the ceiling


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"image": {"width": 2048, "height": 2048}},
            "extra['image'].width x extra['image'].height: 2048x2048 = 4194304 pixels, at most "
            "1048576 (stage 'dit' engine_args.max_pixels)",
        ),
        (  # the kind's own section wins field by field, and is the one named
            {"image": {"width": 32}, "diffusers": {"width": 4096}},
            "extra['diffusers'].width x stage 'dit' engine_args.height: 4096x1024 = 4194304 "
            "pixels, at most 1048576 (stage 'dit' engine_args.max_pixels)",
        ),
    ],
)
def test_a_request_over_max_pixels_is_one_error_naming_the_field_and_the_limit(extra, message):
    args = DiffusersArgs()  # 1024x1024 by default
    with pytest.raises(RequestError) as info:
        checked_options(extra, args, "dit")
    assert str(info.value) == message and info.value.status_code == 400
    _, height, width = checked_options({"image": {"width": 1024, "height": 1024}}, args, "dit")
    assert (height, width) == (1024, 1024)


def test_a_request_over_max_side_names_the_side():
    args = DiffusersArgs(height=32, width=32, max_side=512)
    with pytest.raises(RequestError) as info:
        checked_options({"diffusers": {"height": 528}}, args, "dit")
    assert str(info.value) == (
        "extra['diffusers'].height: 528 pixels, at most 512 (stage 'dit' engine_args.max_side)"
    )
    assert info.value.param == "extra['diffusers'].height"


def fake(needed=(0, 1)):
    stages = {
        0: SimpleNamespace(kind=SimpleNamespace(name="vllm"), args=None, name="encoder"),
        1: SimpleNamespace(kind=SimpleNamespace(name="diffusers"), args=SMALL, name="dit"),
    }
    port = SimpleNamespace(pipeline=SimpleNamespace(stages=stages))
    return SimpleNamespace(needed=frozenset(needed)), port


def test_admission_refuses_an_oversized_or_bad_request_with_one_400():
    request, port = fake()
    big = {"image": {"width": 1040, "height": 1024}}
    params = {0: SamplingParams(extra=big), 1: SamplingParams(extra=big)}
    with pytest.raises(RequestRejected) as info:
        omni_admit_request(request=request, params=params, port=port)
    assert info.value.status_code == 400
    assert "1040x1024 = 1064960 pixels, at most 1048576 (stage 'dit'" in str(info.value)
    bad = {0: SamplingParams(), 1: SamplingParams(extra={"image": {"height": 40}})}
    with pytest.raises(RequestRejected, match=r"extra\['image'\].height: Input should be a mul"):
        omni_admit_request(request=request, params=bad, port=port)
    ok = {0: SamplingParams(), 1: SamplingParams(extra={"image": {"width": 1024}})}
    assert omni_admit_request(request=request, params=ok, port=port) is None
    # a request that does not reach the diffusers stage (e.g. the encoder's states) is not its
    request, port = fake(needed=(0,))
    assert omni_admit_request(request=request, params=params, port=port) is None
