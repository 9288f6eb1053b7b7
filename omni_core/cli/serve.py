"""``omni serve [PIPELINE]``: the OpenAI-compatible server (needs the ``serve`` extra)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from omni_core.cli.app import CliState


def register(app: typer.Typer, state: CliState) -> None:
    defaults = state.settings  # the environment's OMNI_* over the built-in defaults

    @app.command("serve")
    def serve(
        pipeline: Annotated[
            str | None,
            typer.Argument(
                help="Pipeline file or registered name (default: as omni run, the registered "
                "pipeline a plugin marks as the default, else tiny-omni).",
                show_default=False,
            ),
        ] = None,
        # plain defaults (not Annotated): the help names the settings' values, known only here
        host: str | None = typer.Option(
            None, help=f"Bind address (default {defaults.host}; OMNI_HOST).", show_default=False
        ),
        port: int | None = typer.Option(
            None,
            min=1,
            max=65535,
            help=f"Port (default {defaults.port}; OMNI_PORT).",
            show_default=False,
        ),
        api_key: Annotated[
            str | None,
            typer.Option(
                help="Require 'Authorization: Bearer KEY' on every route but /health "
                "(OMNI_API_KEY)."
            ),
        ] = None,
        api_key_file: Annotated[
            Path | None,
            typer.Option(help="Read the API key from this file's first line (OMNI_API_KEY_FILE)."),
        ] = None,
        public_metrics: Annotated[
            bool,
            typer.Option(
                "--public-metrics", help="Serve /metrics and /openapi.json without the key."
            ),
        ] = False,
        max_inflight: Annotated[
            int | None,
            typer.Option(min=1, help="In-flight bound; past it: 429 (OMNI_MAX_INFLIGHT)."),
        ] = None,
        grace_s: Annotated[
            float | None,
            typer.Option(min=0, help="On SIGTERM, time to finish in-flight (OMNI_GRACE_S)."),
        ] = None,
        ray_serve: Annotated[
            bool,
            typer.Option(
                "--ray-serve",
                help="Serve through Ray Serve: one engine per replica (docs/distributed.md).",
            ),
        ] = False,
        replicas: Annotated[int, typer.Option(min=1, help="--ray-serve: deployment replicas.")] = 1,
    ) -> None:
        """Serve one pipeline: /v1/chat/completions, /v1/images/generations, /v1/models,
        /health, /metrics."""
        from omni_core.cli.app import fail

        settings = state.settings
        if not state.log_level_chosen:  # a server says what it does: routine messages at INFO
            logging.getLogger().setLevel(logging.INFO)
        try:
            from omni_core.cli.app import require_extra, require_pipeline_extras
            from omni_core.cli.progress import StartupStatus
            from omni_core.cli.run import default_pipeline, load_named
            from omni_core.errors import ConfigError

            require_extra("omni serve", "serve")  # before importing the server
            config = load_named(pipeline or default_pipeline(state.host), state.host)
            require_pipeline_extras(config, state.host.stage_kinds())
            from omni_core.serve.server import resolve_api_key, run_server

            if replicas != 1 and not ray_serve:
                raise ConfigError([f"--replicas {replicas}: only with --ray-serve"])
            if ray_serve:
                require_extra("omni serve --ray-serve", "ray")
                from omni_core.serve.ray_serve import run_ray_serve

                run_ray_serve(
                    config,
                    settings=settings,
                    host=host or settings.host,
                    port=port if port is not None else settings.port,
                    replicas=replicas,
                    api_key=resolve_api_key(api_key, api_key_file, settings),
                    max_inflight=max_inflight
                    if max_inflight is not None
                    else settings.max_inflight,
                    public_metrics=public_metrics or settings.public_metrics,
                )
                return

            replicas_in_all = sum(stage.replicas for stage in config.stages)
            with StartupStatus(f"omni serve {config.name}", until=replicas_in_all):
                run_server(
                    config,
                    settings=settings,
                    plugins=state.host,
                    host=host or settings.host,
                    port=port if port is not None else settings.port,
                    api_key=resolve_api_key(api_key, api_key_file, settings),
                    public_metrics=public_metrics or settings.public_metrics,
                    max_inflight=max_inflight
                    if max_inflight is not None
                    else settings.max_inflight,
                    grace_s=grace_s if grace_s is not None else settings.grace_s,
                )
        except Exception as exc:
            raise fail(state, exc) from None
