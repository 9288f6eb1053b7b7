"""``omni pipelines`` lists the registered pipelines; ``omni pipelines show NAME`` prints one's
resolved config as YAML that reads back as the same pipeline and names no machine path."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from omni_core.cli import main
from omni_core.config.pipeline import PipelineConfig

ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_prints_the_resolved_config_as_portable_yaml(
    omni_settings, fake_entry_points, capsys, tmp_path, plugin_host
):
    code, out, err = run(capsys, "pipelines", "show", "tiny-omni")
    assert code == 0, err
    data = yaml.safe_load(out)
    expected = plugin_host.pipeline_config("tiny-omni")
    assert data["name"] == "tiny-omni" and data["stages"][1]["inputs"][0]["mode"] == "stream"
    # every field, defaults included ("resolved"), and it reads back as the same pipeline
    assert data["runtime"] == "local" and data["stages"][0]["restart"]["policy"] == "on-failure"
    copy = tmp_path / "copy.yaml"
    copy.write_text(out)
    assert PipelineConfig.from_yaml(copy).portable() == expected.portable()
    for machine in (str(ROOT), sys.prefix, str(Path.home()), str(omni_settings.cache_dir)):
        assert machine not in out


def test_list_is_the_default_and_an_unknown_name_is_one_error(
    omni_settings, fake_entry_points, capsys
):
    code, out, _ = run(capsys, "pipelines")
    assert code == 0 and "tiny-omni" in out
    code, listed, _ = run(capsys, "pipelines", "list")
    assert code == 0 and listed == out
    code, out, err = run(capsys, "pipelines", "show", "nope")
    assert code == 2 and out == ""
    assert err.startswith("error: pipeline 'nope' is not registered (registered: ")
    assert len(err.strip().splitlines()) == 1
