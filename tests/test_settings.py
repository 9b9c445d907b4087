import ipaddress
from pathlib import Path

import pytest

from llmrelay.settings import Environment, Settings, resolve_secret_key


def test_defaults_follow_the_contract() -> None:
    settings = Settings()
    assert settings.database_url == "sqlite:///./llmrelay.db"
    assert settings.max_body_bytes == 16 * 1024 * 1024
    assert settings.trusted_proxies == ()
    assert settings.limits_on_redis_failure.value == "fail_open"
    assert settings.env is Environment.DEVELOPMENT


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMRELAY_MAX_BODY_BYTES", "1024")
    monkeypatch.setenv("LLMRELAY_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.1")
    monkeypatch.setenv("LLMRELAY_LIMITS_ON_REDIS_FAILURE", "fail_closed")
    settings = Settings()
    assert settings.max_body_bytes == 1024
    assert settings.trusted_proxies == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("192.168.1.1/32"),
    )
    assert settings.limits_on_redis_failure.value == "fail_closed"


def test_bad_proxy_cidr_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMRELAY_TRUSTED_PROXIES", "10.0.0.0/33")
    with pytest.raises(ValueError, match="LLMRELAY_TRUSTED_PROXIES"):
        Settings()


def test_cors_origins_are_a_comma_separated_list_of_origins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().cors_origins == ()
    assert Settings().cors_credentials is False  # nothing listed: no CORS at all
    monkeypatch.setenv(
        "LLMRELAY_CORS_ORIGINS", "https://console.example.com/, http://localhost:5173"
    )
    settings = Settings()
    assert settings.cors_origins == ("https://console.example.com", "http://localhost:5173")
    assert settings.cors_credentials is True  # the default once origins are listed
    monkeypatch.setenv("LLMRELAY_CORS_ALLOW_CREDENTIALS", "false")
    assert Settings().cors_credentials is False


@pytest.mark.parametrize("origin", ["console.example.com", "https://x.example/path", "ftp://x"])
def test_a_cors_origin_with_a_path_or_without_a_scheme_is_refused(
    monkeypatch: pytest.MonkeyPatch, origin: str
) -> None:
    monkeypatch.setenv("LLMRELAY_CORS_ORIGINS", origin)
    with pytest.raises(ValueError, match="LLMRELAY_CORS_ORIGINS"):
        Settings()


def test_development_secret_is_generated_once_beside_the_sqlite_file(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/gw.db")
    first = resolve_secret_key(settings)
    second = resolve_secret_key(settings)
    assert first == second
    key_file = tmp_path / "gw.db.secret-key"
    assert key_file.read_text().strip() == first
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_explicit_secret_wins(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/gw.db", secret_key="x" * 40)
    assert resolve_secret_key(settings) == "x" * 40
    assert not (tmp_path / "gw.db.secret-key").exists()


def test_the_record_spool_sits_beside_its_database_unless_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite = Settings(database_url=f"sqlite:///{tmp_path}/gw.db")
    assert sqlite.spool_path == tmp_path / "gw.db.spool"
    postgres = Settings(database_url="postgresql://u@db:5432/llmrelay")
    assert postgres.spool_path == Path("llmrelay-spool")
    assert Settings(database_url="sqlite://").spool_path is None  # in memory: nothing to keep
    monkeypatch.setenv("LLMRELAY_SPOOL_DIR", str(tmp_path / "records"))
    assert Settings(database_url="postgresql://u@db/x").spool_path == tmp_path / "records"


def test_probe_delays_are_seconds_from_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().probe_delays_s == (300.0, 600.0, 1800.0, 3600.0)  # 5, 10, 30, 60 min
    monkeypatch.setenv("LLMRELAY_PROBE_DELAYS_S", " 1, 2.5 ,")
    assert Settings().probe_delays_s == (1.0, 2.5)
    for wrong in ("", "0", "5,-1", "five"):
        monkeypatch.setenv("LLMRELAY_PROBE_DELAYS_S", wrong)
        with pytest.raises(ValueError, match="LLMRELAY_PROBE_DELAYS_S"):
            Settings()


def test_the_admin_listener_is_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().admin_address is None
    monkeypatch.setenv("LLMRELAY_ADMIN_LISTEN", "127.0.0.1:9090")
    assert Settings().admin_address == ("127.0.0.1", 9090)
    monkeypatch.setenv("LLMRELAY_ADMIN_LISTEN", "[::1]:9091")
    assert Settings().admin_address == ("::1", 9091)
    monkeypatch.setenv("LLMRELAY_ADMIN_LISTEN", "admin.internal:9092")
    assert Settings().admin_address == ("admin.internal", 9092)
    monkeypatch.setenv("LLMRELAY_ADMIN_LISTEN", " ")
    assert Settings().admin_address is None


@pytest.mark.parametrize("value", ["9090", "127.0.0.1", "127.0.0.1:0", "host:70000", "::1:9090"])
def test_an_admin_listener_without_a_valid_port_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LLMRELAY_ADMIN_LISTEN", value)
    with pytest.raises(ValueError, match="LLMRELAY_ADMIN_LISTEN"):
        Settings()
