"""``omni run --audio/--image`` reads regular files only, within OMNI_MAX_MEDIA_FILE_BYTES: a
device or a FIFO is exit 2 with one line naming the flag and the file, before any stage starts
(issue 24)."""

from __future__ import annotations

import os

from tests.cli.test_run_media import NO_START, cli  # noqa: F401 (the fixture)
from tests.serve.voice_kit import KIT


def test_devices_fifos_and_big_files_are_exit_2_without_being_read(cli, tmp_path, monkeypatch):  # noqa: F811
    fifo = tmp_path / "in.wav"
    os.mkfifo(fifo)  # nobody writes it: reading it would wait forever
    big = tmp_path / "big.png"
    big.write_bytes(b"\0" * 2048)
    monkeypatch.setenv("OMNI_MAX_MEDIA_FILE_BYTES", "1024")
    cases = [
        ("--audio", "/dev/zero", "cannot read the file (not a regular file)"),
        ("--audio", str(fifo), "cannot read the file (not a regular file)"),
        ("--image", str(big), "the file is too large; the limit is 1024 bytes"),
    ]
    for flag, path, message in cases:
        code, _, err = cli(NO_START, flag, path)
        assert code == 2, err
        assert err[0].startswith(f"error: {flag} {path}: {message}") and len(err) == 1, err
    assert KIT.seen == []
