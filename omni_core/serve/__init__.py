"""``omni serve``: an OpenAI-compatible HTTP server over one engine (FastAPI + uvicorn).

Needs the ``serve`` extra. The engine is the server's only state.
"""
