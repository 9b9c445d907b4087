"""What `llmrelay` writes is its user's alone, whatever umask it was started under: the SQLite
database with its WAL, shared memory and lock file, the record spool and journal, the
generated secret and demo keys, and backups are 0600, the folders it makes 0700
(cli.private_files narrows the umask to 077, as the systemd units' UMask=0077 does; the
image's folder is 0700 too)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import httpx

from tests.support.gateway_process import GatewayProcess
from tests.support.zygote import run_llmrelay

#: A permissive umask, as a shell's default: without the narrowing, files would be 0644.
OPEN_UMASK = 0o022


def _modes(folder: Path) -> dict[str, int]:
    """Path (relative) -> permission bits, for everything under `folder`."""
    modes: dict[str, int] = {}
    for path in sorted(folder.rglob("*")):
        try:
            modes[str(path.relative_to(folder))] = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue  # gone meanwhile (a checkpointed WAL, a rotated spool file)
    return modes


def _exposed(modes: dict[str, int]) -> list[str]:
    """What group or others may read, write or enter."""
    return [f"{name} {mode:04o}" for name, mode in modes.items() if mode & 0o077]


def test_files_the_gateway_creates_are_not_group_or_world_readable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    gateway = GatewayProcess(
        tmp_path, demo=True, database_url=f"sqlite:///{data / 'gateway.db'}", umask=OPEN_UMASK
    )
    gateway.start()
    try:
        key = re.search(r"API key: (sk-lr-\S+)", gateway.logs())
        assert key, gateway.logs()
        answer = httpx.post(
            f"{gateway.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {key.group(1)}"},
            json={"model": "demo", "messages": [{"role": "user", "content": "modes"}]},
        )
        assert answer.status_code == 200, answer.text
        assert gateway.records([answer.headers["x-request-id"]])  # written: the WAL is there
        backup = run_llmrelay(
            ["backup", str(data / "backup.db")],
            env=gateway.env,
            cwd=tmp_path,
            umask=OPEN_UMASK,
        )
        assert backup.returncode == 0, backup.stderr
        while_serving = _modes(data)
    finally:
        assert gateway.stop() == 0, gateway.logs()
    after = _modes(data)

    # (the spool folder holds the journal of ended requests while the gateway serves)
    for name in (
        "gateway.db",
        "gateway.db-wal",
        "gateway.db.lock",
        "gateway.db.spool",
        "backup.db",
    ):
        assert name in while_serving, sorted(while_serving)
    assert "gateway.db.demo-key" in after
    exposed = _exposed(while_serving) + _exposed(after)
    assert not exposed, f"open to group or others (started under umask 022): {exposed}"
