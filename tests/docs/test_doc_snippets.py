"""Every command and snippet of the README and docs/ is checked against the code (issue 41):

- ``omni ...`` command lines (in code blocks and inline code) parse with the real ``omni`` app:
  an option that does not exist, a pipeline, benchmark or model name nobody registers fails. A
  synopsis (``[--quick]``, ``NAME...``, ``FILE``) is checked option by option instead.
- Python blocks compile and every module and name they import exists; the README's example runs.
- YAML blocks parse; a whole pipeline resolves against the installed plugins as ``omni config
  validate`` resolves it, a list of stages as a pipeline's ``stages``, a stage as one stage.

A block that is deliberately not checkable is listed in ``EXCERPTS`` with the reason.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import typer
import yaml

from omni_core.config.pipeline import PipelineConfig
from omni_core.config.resolve import is_existing_path, resolve_pipeline
from omni_core.config.settings import OmniSettings
from omni_core.plugin.hooks import PluginHost
from tests.docs.blocks import ROOT, Block, blocks, pages

# Modules a page defines itself (the reader's package in docs/plugins.md and docs/hooks.md).
DOC_MODULES = {"omni_mine"}
# Blocks not checked, by "path:line" of their first line, with why.
EXCERPTS = {
    "docs/distributed.md:9": "an excerpt: '...' stands for the other stages",
}
SHELL = {"bash", "console", "sh", "shell", ""}
_INLINE = re.compile(r"(?<!`)`((?:\.venv/bin/)?omni [^`]+)`(?!`)")
_PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z_]*|.*\.\.\.|.*[\[\]|].*)$")


@dataclass(frozen=True)
class Command:
    where: str
    text: str
    mention: bool = False  # inline code: names a command and its options, not a whole call


def commands() -> Iterator[Command]:
    """Every ``omni`` invocation of the pages: code-block lines and inline code spans."""
    for page in pages():
        rel = page.relative_to(ROOT).as_posix()
        for block in blocks(page):
            if block.lang not in SHELL or block.where in EXCERPTS:
                continue
            for i, line in enumerate(block.code.splitlines()):
                for part in re.split(r"&&|\|\||;|\|(?=\s)", line):
                    # a comment, a synopsis line's description (after 2+ spaces), a prompt
                    text = re.split(r"\s#|\s{2,}", part.strip())[0].removeprefix("$ ")
                    if re.match(r"^(\S+=\S+\s+)*(\.venv/bin/)?omni(\s|$)", text):
                        yield Command(f"{block.path}:{block.line + i}", text)
        text = page.read_text()
        for m in _INLINE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            inside = _in_fence(text, m.start())
            if not inside:
                yield Command(f"{rel}:{line}", " ".join(m.group(1).split()), mention=True)


def _in_fence(text: str, pos: int) -> bool:
    return sum(1 for ln in text[:pos].splitlines() if ln.lstrip().startswith("```")) % 2 == 1


@pytest.fixture(scope="module", autouse=True)
def example_plugin() -> Iterator[None]:
    """The installed plugins and the example plugin (examples/omni-example-plugin, on the test
    path, not installed): the pages document its ``omni example`` commands."""
    from omni_core.plugin import manager
    from omni_core.testing.fixtures import FakeDistribution, FakeEntryPoint

    installed = manager._iter_entry_points
    example = FakeEntryPoint(
        "example",
        "omni_example_plugin.plugin",
        FakeDistribution("omni-example-plugin", "0.1.0"),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manager, "_iter_entry_points", lambda: [*installed(), example])
        yield


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost.create(OmniSettings())


@pytest.fixture(scope="module")
def omni(host: PluginHost) -> Any:
    from omni_core.cli.app import build_app

    return typer.main.get_command(build_app())


def _tokens(text: str) -> list[str]:
    words = shlex.split(text.split(" > ")[0])
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)  # VAR=value before the command
    assert words and words[0].endswith("omni"), text
    return words[1:]


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def _check_names(path: list[str], args: list[str], host: PluginHost) -> list[str]:
    """Problems with the names given as arguments: pipelines, benchmarks, models."""
    from omni_core.cli.bench import ALL

    problems = []
    if path in (["run"], ["serve"]) and args:
        name = args[0]
        if name not in host.pipelines() and not is_existing_path(ROOT / name):
            if not name.endswith((".yaml", ".yml")):  # a file of the reader's, by its name
                problems.append(f"no pipeline {name!r}: {sorted(host.pipelines())}")
    if path == ["bench"]:
        known = {*ALL, *host.benchmarks()}
        problems += [f"no benchmark {n!r}" for n in args if n not in known]
    if path == ["models", "build"]:
        problems += [f"no model {n!r}" for n in args if n not in host.models()]
    return problems


def _check_synopsis(words: list[str], omni: Any, host: PluginHost) -> list[str]:
    """A synopsis: the command path exists and every option named is one of its options."""
    command, path, problems, names_open = omni, [], [], False
    allowed = _options(omni) | {"--help"}
    for word in words:
        if word.strip("[]").startswith("-"):
            names_open = False  # what follows may be an option's value
            for flag in word.strip("[]").split("=")[0].split("/"):  # --audio/--image: both
                if flag not in allowed:
                    problems.append(f"no option {flag} on omni {' '.join(path)}")
        elif isinstance(command, typer.core.TyperGroup) and not _PLACEHOLDER.match(word):
            names = word.split("/")  # build/list: both
            subs = [command.get_command(None, n) for n in names]  # type: ignore[arg-type]
            if None in subs:
                problems.append(f"no command {word!r} under omni {' '.join(path)}")
                break
            command, path, names_open = subs[0], [*path, names[0]], True
            allowed = _options(command) | {"--help"}
            if path == ["run"]:
                allowed |= {f"--{n}" for n in host.run_options()}
        elif names_open and path in (["run"], ["serve"], ["bench"], ["models", "build"]):
            if not _PLACEHOLDER.match(word):
                problems += _check_names(path, [word], host)
    return problems


def _rest(ctx: Any) -> list[str]:
    """A group context's unparsed words: the subcommand and its arguments."""
    protected = getattr(ctx, "_protected_args", None)
    if protected is None:
        protected = ctx.protected_args
    return [*protected, *ctx.args]


def _check_command(words: list[str], omni: Any, host: PluginHost) -> list[str]:
    """A command line: parsed by the app's click commands as ``omni`` would (no callback runs)."""
    ctx = omni.make_context("omni", list(words))
    command, path, rest = omni, [], _rest(ctx)
    while isinstance(command, typer.core.TyperGroup):
        if not rest:
            return []
        name, command, rest = command.resolve_command(ctx, rest)
        path.append(name)
        ctx = command.make_context(name, rest, parent=ctx)
        rest = _rest(ctx) if isinstance(command, typer.core.TyperGroup) else []
    problems = []
    extra = list(ctx.args)
    if path == ["run"]:
        flags = {f"--{n}" for n in host.run_options()}
        problems += [f"no option {a}" for a in extra if a.startswith("--") and a not in flags]
    elif extra:
        problems.append(f"unexpected arguments {extra}")
    positional = [
        v
        for p in command.params
        if p.param_type_name == "argument"
        for v in (ctx.params.get(p.name) or [] if p.nargs == -1 else [ctx.params.get(p.name)])
        if v is not None
    ]
    return problems + _check_names(path, [str(v) for v in positional], host)


def test_every_omni_command_in_the_docs_parses(omni, host):
    found = list(commands())
    assert len(found) > 100  # the pages' commands, not a parsing accident
    failures = []
    for cmd in found:
        try:
            words = _tokens(cmd.text)
            synopsis = cmd.mention or "--help" in words or any(_PLACEHOLDER.match(w) for w in words)
            check = _check_synopsis if synopsis else _check_command
            problems = check(words, omni, host)
        except Exception as exc:  # click's UsageError / NoSuchOption / BadParameter, shlex
            problems = [f"{type(exc).__name__}: {getattr(exc, 'format_message', exc.__str__)()}"]
        failures += [f"{cmd.where}: `{cmd.text}`: {p}" for p in problems]
    assert not failures, "\n".join(failures)


# -- Python ----------------------------------------------------------------------------------


def python_blocks() -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.lang == "python"]


def _imports(tree: ast.AST) -> Iterator[tuple[str, str | None]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield from ((node.module, alias.name) for alias in node.names)


def test_every_python_block_compiles_and_its_imports_exist():
    blocks_ = python_blocks()
    assert len(blocks_) > 30
    failures = []
    for block in blocks_:
        try:
            tree = ast.parse(block.code, block.where)
            compile(tree, block.where, "exec")
        except SyntaxError as exc:
            failures.append(f"{block.where}: {exc}")
            continue
        for module, name in _imports(tree):
            if module.split(".")[0] in DOC_MODULES:
                continue
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                failures.append(f"{block.where}: import {module}: {exc}")
                continue
            if name and name != "*" and not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    failures.append(f"{block.where}: from {module} import {name}: no such name")
    assert not failures, "\n".join(failures)


def test_the_readmes_python_example_runs_as_written():
    (example,) = [b for b in blocks(ROOT / "README.md") if b.lang == "python"]
    done = subprocess.run(
        [sys.executable, "-c", example.code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines and lines[-1].endswith(" True"), done.stdout  # exactly one finished output
    assert sum(line.endswith(" True") for line in lines) == 1


# -- YAML ------------------------------------------------------------------------------------


def yaml_blocks() -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.lang == "yaml" and b.where not in EXCERPTS]


def _stage_problems(stages: list[Any], where: str, host: PluginHost) -> list[str]:
    """A list of stages checked inside a pipeline: stages they read from are stood in for."""
    ids = {s.get("id") for s in stages}
    needed = sorted(
        {
            edge["stage"] if isinstance(edge, dict) else edge
            for s in stages
            for edge in s.get("inputs", [])
        }
        - ids
    )
    stand_ins = [
        {"id": i, "name": f"stand-in-{i}", "kind": "scripted", "final_output": False}
        for i in needed
    ]
    if not any(s.get("final_output") for s in stages):
        stages = [*stages[:-1], {**stages[-1], "final_output": True}]
    data = {"name": "doc-excerpt", "stages": [*stand_ins, *stages]}
    return _pipeline_problems(data, where, host)


def _pipeline_problems(data: dict[str, Any], where: str, host: PluginHost) -> list[str]:
    from omni_core.errors import ConfigError

    try:
        resolve_pipeline(PipelineConfig.from_dict(data, source=where), host, import_code=False)
    except ConfigError as exc:
        return list(exc.problems)
    return []


def test_every_yaml_block_loads_with_the_config_loader(host):
    found = yaml_blocks()
    assert len(found) > 8
    failures = []
    for block in found:
        try:
            data = yaml.safe_load(block.code)
        except yaml.YAMLError as exc:
            failures.append(f"{block.where}: {exc}")
            continue
        if isinstance(data, dict) and "stages" in data:
            failures += _pipeline_problems(data, block.where, host)
        elif isinstance(data, list):
            failures += _stage_problems(data, block.where, host)
        elif isinstance(data, dict) and "kind" in data:
            stage = {"id": 0, "name": "excerpt", "final_output": True, **data}
            failures += _stage_problems([stage], block.where, host)
        elif not isinstance(data, dict):
            failures.append(f"{block.where}: not a mapping or a list of stages")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    ("text", "mention"),
    [
        ("omni run --promt hi", False),
        ("omni serve tiny-image", False),
        ("omni bench vllm nope --quick", False),
        ("omni models build no-such-model", False),
        ("omni config valdate x.yaml", False),
        ("omni run [PIPELINE] [--promt TEXT]", False),
        ("omni serve --ray-serv", True),
        ("omni run --audio/--imag", True),
    ],
)
def test_the_command_check_refuses_what_omni_refuses(text, mention, omni, host):
    words = _tokens(text)
    synopsis = mention or any(_PLACEHOLDER.match(w) for w in words)
    try:
        problems = (_check_synopsis if synopsis else _check_command)(words, omni, host)
    except Exception as exc:  # click's own refusal
        problems = [str(exc)]
    assert problems, text


def test_the_readmes_layout_names_every_plugin():
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout") : text.index("\n## ", text.index("## Layout") + 1)]
    plugins = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml"))
    assert plugins
    missing = [p for p in plugins if f"`plugins/{p}/`" not in layout]
    assert not missing, missing
