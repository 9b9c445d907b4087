"""`llmrelay rotate-secret` as a real process, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from llmrelay.store.crypto import Sealer
from llmrelay.store.db import create_engine
from tests.support.zygote import run_llmrelay

pytestmark = pytest.mark.e2e

OLD_KEY = secrets.token_urlsafe(48)
NEW_KEY = secrets.token_urlsafe(48)
UPSTREAM_KEY = "sk-upstream-rotation-0001"
CONFIG = f"""
providers:
  - slug: one
    type: openai_compatible
    base_url: http://127.0.0.1:9/v1
    api_key: {UPSTREAM_KEY}
  - slug: two
    type: openai_compatible
    base_url: http://127.0.0.1:9/v1
    headers: {{x-extra: header-secret}}
  - slug: plain
    type: openai_compatible
    base_url: http://127.0.0.1:9/v1
"""


def _run(
    database_url: str, secret_key: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return run_llmrelay(
        list(args),
        env={
            "PATH": os.environ.get("PATH", ""),
            "LLMRELAY_DATABASE_URL": database_url,
            "LLMRELAY_SECRET_KEY": secret_key,
            "LLMRELAY_ENV": "production",
            **env,
        },
        timeout=60,
    )


async def _sealed(database_url: str) -> dict[str, tuple[str, str]]:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT slug, credentials_sealed, credentials_key_id FROM providers"
                    " WHERE credentials_sealed IS NOT NULL"
                )
            )
            return {slug: (sealed, key_id) for slug, sealed, key_id in rows}
    finally:
        await engine.dispose()


async def test_rotation_with_a_key_file_then_idempotent_then_apply_sees_no_change(
    database_url: str, tmp_path: Path
) -> None:
    assert _run(database_url, OLD_KEY, "migrate").returncode == 0
    config = tmp_path / "gw.yaml"
    config.write_text(CONFIG)
    applied = _run(database_url, OLD_KEY, "apply", str(config))
    assert applied.returncode == 0, applied.stderr
    before = await _sealed(database_url)
    assert {key_id for _, key_id in before.values()} == {Sealer(OLD_KEY).key_id}

    # without the previous key the new one cannot open what is stored: refused, unchanged
    refused = _run(database_url, NEW_KEY, "rotate-secret")
    assert refused.returncode == 1
    assert Sealer(OLD_KEY).key_id in refused.stderr
    assert "providers.credentials_sealed of row id=" in refused.stderr
    assert await _sealed(database_url) == before

    key_file = tmp_path / "previous-key"
    key_file.write_text(OLD_KEY + "\n")
    rotated = _run(database_url, NEW_KEY, "rotate-secret", "--previous-key-file", str(key_file))
    assert rotated.returncode == 0, rotated.stderr
    assert "providers.credentials_sealed: 2 to re-seal, 0 already" in rotated.stdout
    assert "re-sealed 2 value(s)" in rotated.stdout
    output = rotated.stdout + rotated.stderr
    assert OLD_KEY not in output and NEW_KEY not in output and UPSTREAM_KEY not in output
    after = await _sealed(database_url)
    assert {key_id for _, key_id in after.values()} == {Sealer(NEW_KEY).key_id}
    for slug, (sealed, _) in after.items():
        assert sealed != before[slug][0]

    again = _run(database_url, NEW_KEY, "rotate-secret", "--previous-key-file", str(key_file))
    assert again.returncode == 0, again.stderr
    assert "nothing to re-seal" in again.stdout
    assert await _sealed(database_url) == after

    # the new key alone opens every credential, and they still hold the file's values
    same = _run(database_url, NEW_KEY, "apply", str(config))
    assert same.returncode == 0, same.stderr
    assert "no changes" in same.stdout
    assert await _sealed(database_url) == after


async def test_the_previous_key_from_the_environment_and_a_dry_run(
    database_url: str, tmp_path: Path
) -> None:
    assert _run(database_url, OLD_KEY, "migrate").returncode == 0
    config = tmp_path / "gw.yaml"
    config.write_text(CONFIG)
    assert _run(database_url, OLD_KEY, "apply", str(config)).returncode == 0
    before = await _sealed(database_url)

    dry = _run(
        database_url, NEW_KEY, "rotate-secret", "--dry-run", LLMRELAY_PREVIOUS_SECRET_KEY=OLD_KEY
    )
    assert dry.returncode == 0, dry.stderr
    assert "2 value(s) would be re-sealed" in dry.stdout
    assert await _sealed(database_url) == before

    done = _run(database_url, NEW_KEY, "rotate-secret", LLMRELAY_PREVIOUS_SECRET_KEY=OLD_KEY)
    assert done.returncode == 0, done.stderr
    after = await _sealed(database_url)
    assert {key_id for _, key_id in after.values()} == {Sealer(NEW_KEY).key_id}


def test_production_refuses_to_rotate_to_a_weak_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gw.db"
    refused = _run(url, "changeme", "rotate-secret")
    assert refused.returncode != 0
    assert "LLMRELAY_SECRET_KEY is too short" in refused.stderr
    assert not (tmp_path / "gw.db").exists()  # refused before touching the database


def test_a_missing_key_file_is_named(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gw.db"
    missing = tmp_path / "nope"
    refused = _run(url, NEW_KEY, "rotate-secret", "--previous-key-file", str(missing))
    assert refused.returncode != 0
    assert f"--previous-key-file: cannot read {missing}" in refused.stderr
