"""Shared fixtures: databases on both SQLite and PostgreSQL, and the services notice."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.store.db import create_engine
from tests.support.closing import Closing
from tests.support.databases import postgres_database, sqlite_url
from tests.support.migrated import (
    drop_postgres_template,
    drop_sqlite_template,
    migrated_postgres_database,
    migrated_sqlite_url,
)
from tests.support.services import (
    REQUIRE_SERVICES,
    postgres_available,
    redis_available,
    skipped_services,
)
from tests.support.shared_tls import share_default_contexts
from tests.support.webhook_receiver import WebhookReceiver

#: The agent matrix's outcomes, for docs/agents.md (tests/agents/results.py).
pytest_plugins = ["tests.agents.results"]

#: How long the tests' HTTP clients wait for an answer unless a test says otherwise. httpx's
#: own default (5 s) is a ceiling a loaded machine passes: a console test's first admin page,
#: or a sign-up hashing a password, took longer in CI runs beside other work. A test that
#: means a limit passes its own `timeout=`.
HTTP_TIMEOUT_S = 60.0


def _generous_http_timeouts() -> None:
    """Make HTTP_TIMEOUT_S the default of every httpx and httpx2 (the next httpx, which the
    openai and anthropic SDKs use) client and one-call function."""
    for module in (httpx, httpx2):
        timeout = module.Timeout(HTTP_TIMEOUT_S)
        functions: list[Any] = [module.Client.__init__, module.AsyncClient.__init__]
        for name in ("request", "stream", "get", "options", "head", "post", "put", "patch"):
            function = getattr(module, name)
            functions.append(getattr(function, "__wrapped__", function))
        functions.append(module.delete)
        for function in functions:
            defaults = function.__kwdefaults__
            assert defaults is not None, function
            assert "timeout" in defaults, function
            defaults["timeout"] = timeout


_generous_http_timeouts()
share_default_contexts()


def need_postgres() -> None:
    if postgres_available():
        return
    if REQUIRE_SERVICES:
        pytest.fail(
            "PostgreSQL at 127.0.0.1:5432 is unreachable (LLMRELAY_TEST_REQUIRE_SERVICES=1)"
        )
    skipped_services.add("PostgreSQL (127.0.0.1:5432)")
    pytest.skip("PostgreSQL at 127.0.0.1:5432 is unreachable")


def need_redis() -> None:
    if redis_available():
        return
    if REQUIRE_SERVICES:
        pytest.fail("Redis at 127.0.0.1:6379 is unreachable (LLMRELAY_TEST_REQUIRE_SERVICES=1)")
    skipped_services.add("Redis (127.0.0.1:6379)")
    pytest.skip("Redis at 127.0.0.1:6379 is unreachable")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A database on each backend (PostgreSQL: a new database per test): empty, or holding the
    current schema when the test also asks for `engine` (a copy of a migrated template:
    tests/support/migrated.py)."""
    migrated = "engine" in request.fixturenames
    if request.param == "sqlite":
        yield await migrated_sqlite_url(tmp_path) if migrated else sqlite_url(tmp_path)
        return
    need_postgres()
    async with migrated_postgres_database() if migrated else postgres_database() as url:
        yield url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated database on each backend (database_url made it so)."""
    engine = create_engine(database_url)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
async def postgres_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """An empty PostgreSQL database (a new one per test), for what only PostgreSQL has; mark
    the test `postgres`. Migrated when the test also asks for `postgres_engine`."""
    need_postgres()
    migrated = "postgres_engine" in request.fixturenames
    async with migrated_postgres_database() if migrated else postgres_database() as url:
        yield url


@pytest.fixture
async def postgres_engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated PostgreSQL database (postgres_url made it so)."""
    engine = create_engine(postgres_url)
    try:
        yield engine
    finally:
        await engine.dispose()


def pytest_sessionfinish() -> None:
    """Each process drops the migrated templates it made (tests/support/migrated.py)."""
    drop_postgres_template()
    drop_sqlite_template()


#: The longest modules (a minute or more of waiting each, measured with --durations): run
#: first, so that under `make test`'s two workers (whole modules each) neither is left with
#: one of them at the end while the other idles.
SLOW_MODULES = (
    "tests/agents/test_agents_matrix.py",
    "tests/e2e/test_record_outage.py",
    "tests/e2e/test_replicas_money.py",
    "tests/console/test_pages_matrix.py",
    "tests/admin/test_openapi_fuzz.py",
    "tests/e2e/test_live_reload.py",
    "tests/e2e/test_rotate_secret.py",
    "tests/console/test_pages_providers.py",
    "tests/console/test_pages_access.py",
    "tests/console/test_pages_more.py",
    "tests/console/test_pages_rough_edges.py",
)


@pytest.fixture
def closing() -> Iterator[Closing]:
    """`client = closing(openai.OpenAI(...))`: closed (with its connections) at the test's end."""
    with contextlib.ExitStack() as stack:
        yield stack.enter_context


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported lives for the whole run: out of every later collection (see
    _own_garbage)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _own_garbage() -> Iterator[None]:
    """A test's garbage is collected at its own end, so a socket, transport or loop it left
    unclosed in a reference cycle warns (and fails) in that test, not in whichever later test
    the collector happened to run in.

    What survives is frozen (out of every later collection), so that each collection walks
    only what the test made: a full collection at every test's end walked everything the
    worker had accumulated, hundreds of thousands of objects, and took more than half of the
    workers' CPU (py-spy, run E of issue 28). The price: cyclic garbage of what a module's
    fixtures made (frozen at its first test's end) is never collected, so a module fixture
    closes what it opens itself, as docs/testing.md says every fixture does."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="module")
def _own_module_garbage() -> Iterator[None]:
    """What a module's fixtures left in cycles while tearing down, collected at the module's
    end (set up before them, so torn down after)."""
    yield
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(SLOW_MODULES)}
    last = len(SLOW_MODULES)
    items.sort(key=lambda item: rank.get(item.location[0], last))  # stable: order kept within


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, Any, None]:
    """What a test found missing travels on its report: under pytest-xdist the tests run in
    worker processes, and only the reports reach the process that prints the summary."""
    outcome = yield
    if skipped_services:
        outcome.get_result().user_properties.append(("skipped_services", sorted(skipped_services)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "skipped_services" and isinstance(value, list):
            skipped_services.update(str(missing) for missing in value)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not skipped_services:
        return
    names = ", ".join(sorted(skipped_services))
    bar = "!" * 78
    terminalreporter.write_line(bar, red=True, bold=True)
    terminalreporter.write_line(f"SKIPPED tests that need: {names}", red=True, bold=True)
    terminalreporter.write_line(
        "Start or install them (see README, 'Run the tests') or run .ci/run, which does and "
        "sets LLMRELAY_TEST_REQUIRE_SERVICES=1, LLMRELAY_TEST_REQUIRE_BROWSER=1 and "
        "LLMRELAY_TEST_REQUIRE_AGENTS=1 so such tests fail instead of skipping (the coding "
        "agents: `make agents`).",
        red=True,
    )
    terminalreporter.write_line(bar, red=True, bold=True)


@pytest.fixture(scope="module")
def webhook_receiver() -> Iterator[WebhookReceiver]:
    """A module's webhook endpoint (tests/support/webhook_receiver.py: the path picks the
    answer, so tests of one module share it by using paths of their own)."""
    server = WebhookReceiver().start()
    try:
        yield server
    finally:
        server.stop()
