"""``omni run PIPELINE --prompt TEXT``: stream outputs, then a per-stage timing table."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from omni_core.cli import run_options
from omni_core.cli.progress import StartupStatus, held_logs
from omni_core.cli.run_output import WavSink, refused, stream, summary, write_media
from omni_core.config.resolve import is_existing_path, resolve_pipeline
from omni_core.errors import RequestError
from omni_core.sampling import SamplingParams

if TYPE_CHECKING:
    from omni_core.cli.app import CliState

CORE_DEFAULT = "tiny-omni"  # omni run's pipeline when no plugin marks one default


def register(app: typer.Typer, state: CliState) -> None:
    from omni_core.cli.app import BAD_INPUT, fail

    @app.command(
        "run",
        # a pipeline's plugin options (omni_register_run_options) arrive as ctx.args; --help
        # is ours, to list them
        context_settings={
            "allow_extra_args": True,
            "ignore_unknown_options": True,
            "help_option_names": [],
        },
    )
    def run(
        ctx: typer.Context,
        pipeline: Annotated[
            str | None,
            typer.Argument(
                help="Pipeline YAML file or registered name (default: the registered pipeline "
                f"a plugin marks as the default, else {CORE_DEFAULT}).",
                show_default=False,
            ),
        ] = None,
        prompt_text: Annotated[
            str, typer.Option("--prompt", "-p", help="The prompt text.")
        ] = "Hello omni world",
        system: Annotated[
            str | None, typer.Option("--system", help="A system message before the prompt.")
        ] = None,
        raw: Annotated[
            bool,
            typer.Option(
                "--raw",
                help="Send the prompt as is, not as a chat message rendered by the first "
                "stage's chat template (as omni serve's chat route does).",
            ),
        ] = False,
        output_dir: Annotated[
            Path,
            typer.Option(
                "--output-dir", "-o", file_okay=False, help="Where WAV/PNG outputs are written."
            ),
        ] = Path("omni-out"),
        max_tokens: Annotated[int | None, typer.Option(min=1, help="Max tokens per stage.")] = None,
        seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
        temperature: Annotated[
            float | None, typer.Option(min=0, help="Sampling temperature.")
        ] = None,
        modality: Annotated[
            list[str] | None, typer.Option("--modality", help="Final outputs wanted (repeat).")
        ] = None,
        audio: Annotated[
            Path | None,
            typer.Option(
                "--audio",
                help="A WAV file sent with the prompt (an input_audio part; the first stage must "
                "take audio).",
            ),
        ] = None,
        image: Annotated[
            list[Path] | None,
            typer.Option(
                "--image",
                help="An image file sent with the prompt (an image_url part; the first stage "
                "must take images); repeat for several (an image editor taking several).",
            ),
        ] = None,
        voice: Annotated[
            str | None,
            typer.Option(
                "--voice",
                help="The voice of the stages that synthesize speech (params.extra['voice'] of "
                "every stage); the pipeline must produce audio.",
            ),
        ] = None,
        extra_fields: Annotated[
            list[str] | None,
            typer.Option(
                "--extra",
                help="KEY=VALUE in every stage's params.extra (repeat; a dotted KEY nests, "
                "VALUE is JSON or else a string), e.g. a plugin's request options.",
            ),
        ] = None,
        steps: Annotated[
            int | None, typer.Option(min=1, help="Denoising steps of the image stage.")
        ] = None,
        size: Annotated[
            str | None, typer.Option(help="Image size WIDTHxHEIGHT, e.g. 256x256.")
        ] = None,
        runtime: Annotated[
            Literal["local", "ray"] | None,
            typer.Option(help="Stage runtime: 'local' or 'ray' (default: the pipeline's)."),
        ] = None,
        show_help: Annotated[
            bool,
            typer.Option(
                "--help",
                help="Show this message and exit; with PIPELINE, also the options its plugins add.",
            ),
        ] = False,
    ) -> None:
        """Run one prompt through a pipeline, streaming its outputs.

        Plugins taking part in PIPELINE may add options (omni run PIPELINE --help lists them).
        """
        _check_flags(ctx, pipeline)  # a typo of our own options, before the pipeline loads
        if show_help:
            print(ctx.get_help())
            source = ctx.get_parameter_source("pipeline")
            if getattr(source, "name", None) == "DEFAULT":  # no PIPELINE given
                print("\nomni run PIPELINE --help also lists the options PIPELINE's plugins add.")
                raise typer.Exit(0)
            try:
                config = _load(pipeline, runtime)
                resolved = resolve_pipeline(config, state.host)
                options = run_options.pipeline_options(state.host, resolved, own_flags(ctx))
            except Exception as exc:
                raise fail(state, exc) from None
            print("\n" + run_options.describe(options, config.name))
            raise typer.Exit(0)
        from omni_core.cli.app import require_pipeline_extras
        from omni_core.engine.factory import create_engine

        overrides: dict[str, Any] = {}
        if max_tokens is not None:
            overrides["max_tokens"] = max_tokens
        if seed is not None:
            overrides["seed"] = seed
        if temperature is not None:
            overrides["temperature"] = temperature
        try:
            check_overrides(overrides)  # before any stage starts
            media = media_parts(audio, image, raw)  # files read and checked before anything else
            config = _load(pipeline, runtime)
            check_voice(voice, config)
            extra = {**image_extra(config, steps, size), **audio_extra(config)}
            # a missing extra is named before any stage starts
            require_pipeline_extras(
                config, state.host.stage_kinds(), runtime and f"omni run --runtime {runtime}"
            )
            resolved = resolve_pipeline(config, state.host)
            run_options.check_declared_voice(state.host, resolved, voice)  # before any model
            options = run_options.pipeline_options(state.host, resolved, own_flags(ctx))
            run_options.parse_args(list(ctx.args), options, config.name, extra)
            merge_extra(extra, extra_fields or [])
            if voice is not None:
                extra["voice"] = voice
            prompt: Any = prompt_text
            if raw and system:
                raise RequestError("--system needs the chat template (drop --raw)")
            # models build and stages start: a status line says which and for how long
            first = "starting" if raw else "loading the first stage's tokenizer and chat template"
            with StartupStatus(f"omni run {config.name}", first_step=first):
                if not raw:  # rendered now: a prompt the first stage cannot take starts no stage
                    prompt = render(resolved, state.settings, prompt_text, system, media)
                engine = create_engine(config, settings=state.settings, plugins=state.host)
        except Exception as exc:
            raise fail(state, exc) from None
        try:
            params = None
            if overrides or extra:
                params = engine.request_params(
                    {stage.name: overrides for stage in engine.pipeline.stages.values()},
                    extra=extra or None,
                )
            sink = WavSink(output_dir)
            try:
                with held_logs():  # no log line in the middle of the streamed answer
                    outputs = asyncio.run(stream(engine, prompt, params, modality, sink))
            finally:
                sink.close()
        except Exception as exc:
            raise fail(state, exc) from None
        finally:
            engine.shutdown()
        summary(outputs)
        write_media(outputs, output_dir, sink)
        final = outputs[-1] if outputs else None
        if final is not None and final.error is not None and refused(final):
            # a stage or a plugin's admission refused the request: exit 2, but a 429 (over a
            # quota: retry later) is no fault of the input, exit 1
            print(f"error: {final.error.message}", file=sys.stderr)
            raise typer.Exit(1 if final.error.status_code == 429 else BAD_INPUT)
        if final is not None and final.finish_reason in ("error", "abort", "timeout"):
            raise typer.Exit(1)

    def _check_flags(ctx: typer.Context, pipeline: str | None) -> None:
        """Unknown arguments that are typos of ``omni run``'s options (or global options after
        the command) are a usage error suggesting the fix; a PIPELINE that looks like an option
        (``omni run --promt hi``) is one too."""
        from omni_core.cli.suggest import UsageError, check_run_flags, no_such_option_message

        dashed = pipeline is not None and pipeline[:1] == "-" and not is_existing_path(pipeline)
        tokens = ([pipeline] if dashed and pipeline else []) + list(ctx.args)
        try:
            plugin_flags = {f"--{name}" for name in state.host.run_options()}
        except Exception as exc:
            raise fail(state, exc) from None
        own = own_flags(ctx)
        check_run_flags(tokens, own, plugin_flags, ctx)
        if dashed and pipeline:
            raise UsageError(no_such_option_message(pipeline, own, ctx.command_path), ctx)

    def _load(pipeline: str | None, runtime: str | None) -> Any:
        """The pipeline's config, ``--runtime`` applied (no stage starts)."""
        if pipeline is None:
            pipeline = default_pipeline(state.host)
        config = load_named(pipeline, state.host)
        if runtime is not None:
            config = with_runtime(config, runtime, state.host)
        return config


def default_pipeline(host: Any) -> str:
    """``omni run``'s pipeline when none is named: the registered pipeline a plugin marks
    ``default`` (PipelineSpec.default), else the core's :data:`CORE_DEFAULT`. Two marked: a
    ConfigError naming them (name one)."""
    from omni_core.errors import ConfigError

    marked = sorted(name for name, spec in host.pipelines().items() if spec.default)
    if len(marked) > 1:
        raise ConfigError(
            [f"omni run: pipelines {', '.join(marked)} are each marked default: name one"]
        )
    return marked[0] if marked else CORE_DEFAULT


def load_named(pipeline: str, host: Any) -> Any:
    """A pipeline file (an existing path wins) or registered name; an unknown name suggests the
    closest registered ones."""
    from omni_core.cli.suggest import unknown_pipeline
    from omni_core.config.resolve import load_pipeline
    from omni_core.errors import ConfigError

    if is_existing_path(pipeline):
        return load_pipeline(Path(pipeline), host)
    try:
        return load_pipeline(pipeline, host)
    except ConfigError as exc:
        registered = host.pipelines()
        if pipeline in registered:
            raise
        raise unknown_pipeline(exc, pipeline, registered) from None


def own_flags(ctx: typer.Context) -> set[str]:
    """Every option string of ``omni run`` itself (``--prompt``, ``-p``, ``--help``...)."""
    return {flag for param in ctx.command.params for flag in (*param.opts, *param.secondary_opts)}


def check_overrides(overrides: dict[str, Any]) -> None:
    """Sampling options as SamplingParams parses them; the error names the options given."""
    try:
        SamplingParams.from_mapping(overrides)
    except RequestError as exc:
        given = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in overrides.items())
        raise RequestError(f"{given}: {exc}") from None


def with_runtime(target: Any, runtime: str, host: Any) -> Any:
    """The pipeline with its ``runtime`` overridden (validated like the field)."""
    from omni_core.config.pipeline import PipelineConfig
    from omni_core.config.resolve import load_pipeline

    config = load_pipeline(target, host)
    data = config.model_dump(exclude_unset=True)
    return PipelineConfig.from_dict({**data, "runtime": runtime}, source=config.source)


INPUTS = {"text": "text", "input_audio": "audio", "image_url": "images"}  # by content part type


def media_parts(
    audio: Path | None, image: list[Path] | Path | None, raw: bool
) -> list[tuple[str, Any]]:
    """``--audio`` / ``--image`` files (``--image`` repeatable) as (flag and file, chat content
    part), each file read and checked now (a RequestError naming the flag and the file)."""
    from omni_core.chat_media import audio_file_part, image_file_part

    images = image if isinstance(image, list) else [image] if image is not None else []
    parts: list[tuple[str, Any]] = []
    for flag, path, make in (
        ("--audio", audio, audio_file_part),
        *(("--image", path, image_file_part) for path in images),
    ):
        if path is None:
            continue
        where = f"{flag} {path}"
        if raw:
            raise RequestError(f"{where}: media need the chat template (drop --raw)")
        parts.append((where, make(path, where)))
    return parts


def image_extra(config: Any, steps: int | None, size: str | None) -> dict[str, Any]:
    """``--steps`` / ``--size`` as the request's generic image options
    (``extra[IMAGE_OPTIONS]``, :mod:`omni_core.media`), which the pipeline's image stage reads.
    They need a pipeline with a final image output; a bad ``--size`` names the flag."""
    from omni_core.media import IMAGE_OPTIONS, image_options

    flags = [flag for flag, value in (("--steps", steps), ("--size", size)) if value is not None]
    if not flags:
        return {}
    if not any(s.final_output and s.final_output_type == "image" for s in config.stages):
        raise RequestError(f"{flags[0]}: pipeline '{config.name}' produces no image")
    try:
        return {IMAGE_OPTIONS: image_options(size, steps, where="--size")}
    except ValueError as exc:
        raise RequestError(str(exc)) from None


def audio_extra(config: Any) -> dict[str, Any]:
    """A pipeline with a final audio output is asked for its audio as early as it can give it
    (the generic audio option ``stream``, ``extra[AUDIO_OPTIONS]``, :mod:`omni_core.media`):
    ``omni run`` writes the WAV as pieces arrive. ``--extra audio.stream=false`` asks for it
    whole."""
    from omni_core.media import AUDIO_OPTIONS, audio_options

    if any(s.final_output and s.final_output_type == "audio" for s in config.stages):
        return {AUDIO_OPTIONS: audio_options(stream=True)}
    return {}


def merge_extra(extra: dict[str, Any], fields: list[str]) -> None:
    """``--extra KEY=VALUE`` fields into ``extra`` (a dotted KEY nests; VALUE is JSON, else the
    string); a malformed one names the flag."""
    import json

    for field in fields:
        key, sep, text = field.partition("=")
        path = key.split(".")
        if not sep or not all(path):
            raise RequestError(f"--extra {field}: expected KEY=VALUE (KEY may be dotted: a.b)")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        target = extra
        for name in path[:-1]:
            node = target.setdefault(name, {})
            if not isinstance(node, dict):
                raise RequestError(f"--extra {field}: '{name}' is already set to a value")
            target = node
        target[path[-1]] = value


def check_voice(voice: str | None, config: Any) -> None:
    """``--voice`` needs a pipeline with a final audio output (which voices exist its plugins
    may declare, :func:`~omni_core.cli.run_options.check_declared_voice`; otherwise the speaking
    stage says, when the request reaches it)."""
    if voice is None:
        return
    if not voice:
        raise RequestError("--voice: the voice name is empty")
    finals = [s for s in config.stages if s.final_output]
    if not any(s.final_output_type == "audio" for s in finals):
        produced = ", ".join(f"'{s.name}' ({s.final_output_type})" for s in finals)
        raise RequestError(
            f"--voice {voice}: pipeline '{config.name}' produces no audio (final stages: "
            f"{produced})"
        )


def render(
    pipeline: Any, settings: Any, text: str, system: str | None, media: list[tuple[str, Any]]
) -> Any:
    """The chat (system message, then one user message: media parts, then the text) rendered by
    the first stage's renderer, built without starting any stage. A media part the first stage
    does not take is a RequestError naming the flag and the file."""
    from omni_core.chat import ChatOptions, parse_messages, pipeline_renderer

    renderer = pipeline_renderer(pipeline, settings)
    for where, part in media:
        if part["type"] not in renderer.accepts:
            takes = " and ".join(INPUTS.get(t, t) for t in sorted(renderer.accepts))
            raise RequestError(
                f"{where}: pipeline '{pipeline.config.name}' cannot take {INPUTS[part['type']]}: "
                f"its first stage '{renderer.stage_name}' takes {takes} only"
            )
    content: Any = text
    if media:
        content = [part for _, part in media] + [{"type": "text", "text": text}]
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": content})
    return renderer.render_chat(parse_messages(messages), ChatOptions())
