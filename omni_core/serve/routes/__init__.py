"""One router per resource of ``omni serve``'s app, each built from the app's
:class:`~omni_core.serve.context.ServeContext` (the engine handle, settings, guards and shared
request checks) by a ``*_router(ctx)`` function; :func:`omni_core.serve.app.create_app` only
composes them (middleware, error handlers, these routers, then the plugins' routes).

:mod:`.models` (``/v1/models``), :mod:`.ops` (``/health``, ``/metrics``), :mod:`.chat`
(``/v1/chat/completions``), :mod:`.completions` (``/v1/completions``), :mod:`.images`
(``/v1/images/generations``); vLLM's utility routes (``/version``, ``/tokenize``) are in
:mod:`omni_core.serve.tokenize`. A new resource (speech, videos, image edits) gets a module of
its own here with its ``*_router(ctx)``, its body in :mod:`omni_core.serve.protocol`, and one
``include_router`` line in ``create_app``. Realtime sessions are a plugin's routes, mounted
through the ``omni_register_server_routes`` hook after these.
"""
