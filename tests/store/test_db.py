import pytest

from llmrelay.store.db import DatabaseURLError, async_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///./llmrelay.db", "sqlite+aiosqlite:///./llmrelay.db"),
        ("sqlite:////abs/path.db", "sqlite+aiosqlite:////abs/path.db"),
        ("postgresql://u@h:5432/db", "postgresql+asyncpg://u@h:5432/db"),
        ("postgres://u:p@h/db", "postgresql+asyncpg://u:p@h/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
    ],
)
def test_async_driver_is_picked(given: str, expected: str) -> None:
    assert async_url(given) == expected


@pytest.mark.parametrize("bad", ["mysql://u@h/db", "not a url"])
def test_unsupported_urls_are_refused(bad: str) -> None:
    with pytest.raises(DatabaseURLError, match="LLMRELAY_DATABASE_URL"):
        async_url(bad)
