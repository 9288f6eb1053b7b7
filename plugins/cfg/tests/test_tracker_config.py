"""The tracker's bookkeeping, the ``cfg:`` section, overrides, registration and the reaper."""

from __future__ import annotations

import importlib.metadata as md
import types

import omni_cfg.plugin as cfg_plugin
import pytest
from omni_cfg.config import CfgSection, guided_target, request_options
from omni_cfg.errors import CfgError
from omni_cfg.tracker import Bundle, Tracker
from pydantic import BaseModel, ConfigDict

from omni_core import PLUGIN_API_VERSION, OmniSettings, PluginHost, hookimpl
from omni_core.config.pipeline import PipelineConfig
from omni_core.config.resolve import resolve_pipeline
from omni_core.errors import ConfigError, OmniError
from omni_core.plugin.types import StageKind
from omni_core.sampling import SamplingParams


def bundle(pid="p", roles=("neg",), timeout=1.0):
    return Bundle(pid, {f"{pid}#{r}": r for r in roles}, 3.0, {r: -2.0 for r in roles}, timeout)


def test_tracker_delivery_is_idempotent_and_non_destructive():
    t = Tracker()
    t.register_parent(bundle(roles=("neg", "img")))
    t.register_companion("p#neg", "p")
    t.register_companion("p#img", "p")
    assert t.deliver("p#neg", "out1") is None  # companion first: nobody waits yet
    assert t.defer("p", now=0.0) and not t.defer("p", now=0.5)  # re-defer keeps the deadline
    assert t.bundles["p"].deadline == 1.0
    assert t.deliver("p#neg", "dup") is None and t.bundles["p"].outputs["p#neg"] == "out1"
    assert t.deliver("p#img", "out2") == "p"  # completes the deferred parent: flush it
    assert t.deliver("p#img", "again") is None and t.releases == 1
    t.forget_companion("p#neg")  # a delivered companion ends: the bundle keeps its output
    assert t.bundles["p"].outputs == {"p#neg": "out1", "p#img": "out2"}
    assert t.cleanup_parent("p") == ["p#neg", "p#img"] and len(t) == 0


def test_tracker_companion_of_unknown_parent_is_an_error():
    with pytest.raises(KeyError, match="unregistered parent"):
        Tracker().register_companion("x#neg", "x")


def test_tracker_expired_parents_are_claimed_once():
    t = Tracker()
    for pid, timeout in (("a", 1.0), ("b", 2.0)):
        t.register_parent(bundle(pid, timeout=timeout))
        t.defer(pid, now=0.0)
    assert t.next_deadline() == 1.0
    assert t.pop_expired(1.5) == ["a"] and t.pop_expired(1.5) == []
    assert t.next_deadline() == 2.0
    t.cleanup_parent("b")
    assert t.next_deadline() is None and t.pop_expired(10.0) == []
    t.cleanup_parent("a")
    assert len(t) == 0


STAGES = """
name: g
stages:
  - {id: 0, name: enc, kind: scripted}
  - {id: 1, name: dit, kind: diffusers, inputs: [0], final_output: true, final_output_type: image}
"""


class AnyArgs(BaseModel):
    model_config = ConfigDict(extra="allow")


# the image kind omni-cfg guides by default (omni-qwen-image's, here only resolved, never run):
# it declares the capability omni-cfg asks for; "painter" is a kind of another name that does
# too, "plain-image" one that does not
image_kind = types.ModuleType("cfg_test_image_kind")
image_kind.OMNI_PLUGIN_API_VERSION = PLUGIN_API_VERSION
image_kind.omni_register_stage_kinds = hookimpl(
    lambda: [
        StageKind(name, lambda *args: None, AnyArgs, output_mode="whole", accepts=accepts)
        for name, accepts in [
            ("diffusers", ("conditionings",)),
            ("painter", ("conditionings",)),
            ("plain-image", ()),
        ]
    ]
)


def cfg_host(settings, with_cfg=True):
    extra = [("image", image_kind)] + ([("cfg", cfg_plugin)] if with_cfg else [])
    return PluginHost.create(settings, load_entry_points=False, extra_plugins=extra)


def resolve(text, host):
    return resolve_pipeline(PipelineConfig.from_yaml_text(text, source="<p>"), host)


def test_section_is_validated_with_clear_errors(omni_settings):
    host = cfg_host(omni_settings)
    ok = resolve(STAGES + "cfg: {guidance_scale: 5, negative_prompt: dull, timeout_s: 2}\n", host)
    section = ok.sections["cfg"]
    assert isinstance(section, CfgSection) and section.guidance_scale == 5
    bad = {
        "cfg: {guidance_scale: -1}": "section 'cfg': field 'guidance_scale'",
        "cfg: {timeout_s: .inf}": "section 'cfg': field 'timeout_s'",
        "cfg: {bogus: 1}": "section 'cfg': field 'bogus': unknown field",
        "cfg: {stage: nope}": "no stage named 'nope' (stages: enc, dit)",
        "cfg: {stage: enc}": "guided stage 'enc' needs exactly one on_finish input",
        "cfg: {branches: [{name: neg, prompt: a, scale: 1}]}": "branch names must be unique",
    }
    for text, message in bad.items():
        with pytest.raises(ConfigError) as info:
            resolve(STAGES + text + "\n", host)
        assert message in str(info.value), text


def test_core_rejects_the_section_without_the_plugin_naming_it(omni_settings):
    with pytest.raises(ConfigError, match="<p>: field 'cfg': unknown field"):
        resolve(STAGES + "cfg: {}\n", cfg_host(omni_settings, with_cfg=False))


def test_requires_plugins_fails_at_start_up_when_disabled(monkeypatch, omni_settings, tmp_path):
    from omni_core.engine.factory import create_engine

    path = tmp_path / "guided.yaml"
    path.write_text(STAGES.replace("diffusers", "scripted") + "requires_plugins: [cfg]\n")
    monkeypatch.setenv("OMNI_DISABLE_PLUGINS", "cfg")
    settings = OmniSettings()
    host = PluginHost.create(settings)  # the installed entry points, minus the disabled one
    assert host.pm.get_plugin("cfg") is None and "cfg" in host.pm.disabled
    with pytest.raises(ConfigError) as info:
        create_engine(str(path), settings=settings, plugins=host)
    assert "field 'requires_plugins': plugin 'cfg' is not installed or disabled" in str(info.value)


def test_auto_target(omni_settings):
    config = PipelineConfig.from_yaml_text(STAGES)
    target = guided_target(config, None, strict=False)
    assert (target.stage, target.source) == (1, 0)
    unguided = PipelineConfig.from_yaml_text(STAGES.replace("kind: diffusers", "kind: scripted"))
    assert guided_target(unguided, None, strict=False) is None
    host = cfg_host(omni_settings)
    assert "cfg" in host.for_pipeline(resolve(STAGES, host)).active  # omni_applies_to: yes
    plain = resolve(STAGES.replace("diffusers", "scripted"), host)
    assert "cfg" not in host.for_pipeline(plain).active


def test_the_guided_kind_is_found_by_its_capability_not_its_name(omni_settings):
    host = cfg_host(omni_settings)
    painter = resolve(STAGES.replace("kind: diffusers", "kind: painter"), host)
    assert "cfg" in host.for_pipeline(painter).active  # accepts conditionings: guided
    no_capability = resolve(STAGES.replace("kind: diffusers", "kind: plain-image"), host)
    assert "cfg" not in host.for_pipeline(no_capability).active


def test_overrides_weights_and_errors():
    section = CfgSection(guidance_scale=4.0, negative_prompt="n")
    params = {0: SamplingParams(extra={"cfg": {"guidance_scale": 1.0}})}
    options = request_options(section, params, "r")
    assert options.weights() == (1.0, {"neg": 0.0})  # scale 1: the negative has no weight
    assert (
        request_options(section, {0: SamplingParams(extra={"cfg": {"enabled": False}})}, "r")
        is None
    )
    with pytest.raises(CfgError, match="request 'r': invalid extra\\['cfg'\\]") as info:
        request_options(section, {0: SamplingParams(extra={"cfg": {"scale": 2}})}, "r")
    assert isinstance(info.value, OmniError)


def test_installed_distribution_provides_entry_point_cfg():
    eps = [ep for ep in md.entry_points(group="omni_core.plugins") if ep.name == "cfg"]
    assert len(eps) == 1 and eps[0].value == "omni_cfg.plugin"
    assert eps[0].dist.name == "omni-cfg"
    host = PluginHost.create(OmniSettings(), load_entry_points=True)
    info = host.pm.plugin_info["cfg"]
    assert (info.distribution, info.builtin) == ("omni-cfg", False)


def test_a_disabled_section_guides_only_the_requests_that_ask():
    section = CfgSection(enabled=False, guidance_scale=4.0, negative_prompt="n")
    unasked = [{}, {"cfg": {"timeout_s": 5}}, {"cfg": {"companion_params": {"seed": 1}}}]
    for extra in unasked:
        assert request_options(section, {0: SamplingParams(extra=extra)}, "r") is None, extra
    for asked, scale, negative in (
        ({"negative_prompt": "blurry"}, 4.0, "blurry"),  # the section's scale
        ({"guidance_scale": 2.0}, 2.0, "n"),  # the section's negative prompt
        ({"enabled": True}, 4.0, "n"),
    ):
        options = request_options(section, {0: SamplingParams(extra={"cfg": asked})}, "r")
        assert (options.guidance_scale, options.negative_prompt) == (scale, negative), asked
    off = {"cfg": {"enabled": False, "negative_prompt": "blurry"}}
    assert request_options(section, {0: SamplingParams(extra=off)}, "r") is None


def test_a_disabled_section_naming_a_missing_stage_is_refused(omni_settings):
    with pytest.raises(ConfigError, match="no stage named 'nope'"):
        resolve(STAGES + "cfg: {enabled: false, stage: nope}\n", cfg_host(omni_settings))


def test_run_options_map_onto_the_requests_override():
    from omni_cfg.plugin import omni_register_run_options

    options = {o.name: o for o in omni_register_run_options()}
    assert set(options) == {"negative-prompt", "guidance"}
    negative, guidance = options["negative-prompt"], options["guidance"]
    assert negative.to_extra(negative.parse("blurry")) == {"cfg": {"negative_prompt": "blurry"}}
    assert guidance.to_extra(guidance.parse("4")) == {"cfg": {"guidance_scale": 4.0}}
    for bad in ("-1", "nan", "inf", "x"):
        with pytest.raises(ValueError):
            guidance.parse(bad)
    # what the flags set is a valid override asking for guidance
    merged = {"cfg": {"negative_prompt": "blurry", "guidance_scale": 4.0}}
    section = CfgSection(enabled=False)
    options_ = request_options(section, {0: SamplingParams(extra=merged)}, "r")
    assert options_.weights() == (4.0, {"neg": -3.0})


def test_branches_are_bounded_each_one_is_a_hidden_request():
    branch = {"prompt": "x", "scale": 0.5}
    CfgSection.model_validate({"branches": [{**branch, "name": f"b{i}"} for i in range(8)]})
    with pytest.raises(ValueError, match="branches"):
        CfgSection.model_validate({"branches": [{**branch, "name": f"b{i}"} for i in range(9)]})


def branches(k):
    return [{"name": f"b{i}", "prompt": "x", "scale": 0.1} for i in range(k)]


def test_a_sections_max_branches_bounds_it_and_is_at_most_8():
    CfgSection.model_validate({"max_branches": 2, "branches": branches(2)})
    with pytest.raises(ValueError, match="branches: 3 given, at most max_branches=2"):
        CfgSection.model_validate({"max_branches": 2, "branches": branches(3)})
    with pytest.raises(ValueError, match="max_branches"):
        CfgSection.model_validate({"max_branches": 9})


def test_a_requests_branches_are_bounded_by_the_pipelines_limit():
    def options(section, k):
        extra = {"cfg": {"branches": branches(k)}}
        return request_options(section, {0: SamplingParams(extra=extra)}, "r")

    assert len(options(CfgSection(), 8).branches) == 8
    for section, k, limit in ((CfgSection(), 9, 8), (CfgSection(), 5000, 8)):
        with pytest.raises(CfgError) as info:
            options(section, k)
        assert str(info.value) == (
            f"request 'r': extra['cfg'].branches: {k} given, at most {limit} (the pipeline's "
            "cfg.max_branches; each branch is a hidden request)"
        )
    low = CfgSection(max_branches=1)
    assert len(options(low, 1).branches) == 1
    with pytest.raises(CfgError, match=r"extra\['cfg'\].branches: 2 given, at most 1 "):
        options(low, 2)
    # a tuple (the Python API) is bounded too; max_branches is not a request's to change
    extra = {"cfg": {"branches": tuple(branches(9))}}
    with pytest.raises(CfgError, match="9 given, at most 8"):
        request_options(CfgSection(), {0: SamplingParams(extra=extra)}, "r")
    extra = {"cfg": {"max_branches": 100, "negative_prompt": "n"}}
    with pytest.raises(CfgError, match="max_branches"):
        request_options(CfgSection(), {0: SamplingParams(extra=extra)}, "r")


def test_a_guided_requests_runs_count_against_max_n():
    from omni_cfg.config import check_work

    guided = request_options(CfgSection(), {0: SamplingParams()}, "r")  # negative prompt only
    check_work(guided, 8, 16, "r")  # 8 samples + 8 companions
    with pytest.raises(CfgError) as info:
        check_work(guided, 9, 16, "r")
    assert "n=9 guided samples with 1 hidden companion request(s) each" in str(info.value)
    assert "are 18 runs, at most 16 (OMNI_MAX_N" in str(info.value)
    extra = {"cfg": {"branches": branches(8)}}
    wide = request_options(CfgSection(), {0: SamplingParams(extra=extra)}, "r")
    check_work(wide, 1, 10, "r")  # parent + negative + 8 branches
    with pytest.raises(CfgError, match="are 10 runs, at most 9"):
        check_work(wide, 1, 9, "r")
