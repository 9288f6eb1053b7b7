"""omni_core.media: the generic image options a request carries (``--size``/``--steps``)."""

from __future__ import annotations

import re

import pytest

from omni_core.media import image_options


def test_size_and_steps_become_the_generic_image_options():
    assert image_options("64x32", 3) == {"width": 64, "height": 32, "steps": 3}
    assert image_options("16X16") == {"width": 16, "height": 16}
    assert image_options(None, 5) == {"steps": 5}
    assert image_options() == {}


@pytest.mark.parametrize(
    "size", ["large", "64x", "x64", "-1x64", "64x64x64", "\uff16\uff14x64", "\u00b2x4"]
)
def test_a_malformed_size_names_where_it_came_from(size):
    with pytest.raises(ValueError, match=re.escape(f"--size {size}: expected WIDTHxHEIGHT")):
        image_options(size, where="--size")
