"""``run_cli``: an in-process ``omni`` (``omni_core.cli.main``) with only the built-in plugins and
``fake_entry_points``; returns (exit code, stdout, stderr)."""

from __future__ import annotations

import pytest

from omni_core.cli import main


@pytest.fixture
def run_cli(omni_settings, fake_entry_points, capsys):
    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run
