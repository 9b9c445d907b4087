"""Schemathesis over the admin API's own OpenAPI document: every operation, called with
generated (valid and invalid) parameters and bodies on a real migrated database holding one
of each resource, never answers 500, answers only the status codes it documents, with the
documented content type and a body matching the documented schema; and without credentials
every operation but sign-in answers 401 in the error shape.

Bounded for CI: derandomized (the same cases on every run) and a few examples per operation.
Schemathesis calls the app in-process on an event loop of its own (not the test's), so the app
gets an engine without a pool: no connection outlives the request, or the loop, it was made
on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import CheckFunction, not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi import checks
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from llmrelay.admin.app import create_admin
from llmrelay.admin.errors import ERRORS
from llmrelay.admin.state import AdminState
from llmrelay.billing.payments import Payments
from llmrelay.jobs.probe import Prober
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.store.db import async_url, create_engine, is_sqlite
from tests.admin.access_support import FAST_PASSWORDS, add_user
from tests.admin.conftest import ADMIN_TOKEN, SEALER
from tests.admin.route_table import ROUTES
from tests.admin.support import assert_error
from tests.jobs.ops_support import registry

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

#: Examples per operation and generation mode (valid, invalid): the file takes about 50 s on
#: one core, SQLite and PostgreSQL (docs/admin-api.md, "Conformance").
MAX_EXAMPLES = 8
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


async def _seed(api: httpx.AsyncClient, engine: AsyncEngine) -> dict[str, str]:
    """One row of each resource, through the API (as an operator would make them); the
    path-parameter name each id fills."""

    async def made(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await api.post(path, json=body)
        assert response.status_code == 201, response.text
        found: dict[str, Any] = response.json()
        return found

    tenant = await made("/tenants", {"slug": "acme", "name": "Acme"})
    provider = await made(
        f"/providers?tenant_id={tenant['id']}",
        {"slug": "up", "type": "mock", "api_key": "sk-upstream-0123456789"},
    )
    policy = await made(f"/policies?tenant_id={tenant['id']}", {"name": "eu", "providers": ["up"]})
    model = await made(
        f"/models?tenant_id={tenant['id']}",
        {"name": "chat", "routes": [{"provider": "up", "upstream_model": "m1"}]},
    )
    route = model["routes"][0]
    price = await made(
        f"/models/{model['id']}/prices", {"input_per_mtok": 1.5, "output_per_mtok": 2}
    )
    project = await made(
        f"/projects?tenant_id={tenant['id']}", {"name": "web", "routing_policy": "eu"}
    )
    key = await made(f"/projects/{project['id']}/keys", {"name": "ci"})
    user = await add_user(engine, "dev@acme.test", {tenant["id"]: "developer"})
    return {
        "tenant_id": tenant["id"],
        "provider_id": provider["id"],
        "policy_id": policy["id"],
        "model_id": model["id"],
        "route_id": route["id"],
        "price_id": price["id"],
        "project_id": project["id"],
        "key_id": key["id"],
        "user_id": user,
    }


@pytest.fixture
async def seeded(engine: AsyncEngine) -> dict[str, str]:
    state = AdminState(ADMIN_TOKEN, engine=engine, sealer=SEALER, passwords=FAST_PASSWORDS)
    transport = httpx.ASGITransport(app=create_admin(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://admin", headers=AUTH) as api:
        return await _seed(api, engine)


def _unpooled(url: str) -> AsyncEngine:
    if is_sqlite(url):
        return create_engine(url, poolclass=NullPool)
    return create_async_engine(async_url(url), poolclass=NullPool)


def _with_seeded_rows(loaded: BaseSchema, seeded: dict[str, str]) -> None:
    @loaded.hook
    def flatmap_path_parameters(
        _context: Any, path_parameters: dict[str, Any] | None
    ) -> st.SearchStrategy[dict[str, Any] | None]:
        """The generated ids, or the seeded rows' (so the handlers past the 404 run too)."""
        known = {name: seeded[name] for name in path_parameters or () if name in seeded}
        if not known:
            return st.just(path_parameters)
        assert path_parameters is not None
        return st.sampled_from([{**path_parameters, **known}, path_parameters])

    @loaded.hook
    def map_headers(_context: Any, headers: dict[str, Any] | None) -> dict[str, Any]:
        """Changes need If-Match (428 without): `*` lets them reach the service's rules."""
        return {**(headers or {}), "If-Match": "*"}


@pytest.fixture
async def providers() -> AsyncIterator[ProviderRegistry]:
    """The providers layer for POST /providers/{id}/test (the seeded provider is the
    built-in mock: answered in process, whatever loop the case runs on)."""
    async with registry() as found:
        yield found


@pytest.fixture
def admin_schema(
    database_url: str, seeded: dict[str, str], providers: ProviderRegistry
) -> BaseSchema:
    """The admin app's schema, loaded from the app the cases are sent to: the state a started
    server has (app.py), Stripe not configured."""
    engine = _unpooled(database_url)
    state = AdminState(
        ADMIN_TOKEN,
        engine=engine,
        sealer=SEALER,
        passwords=FAST_PASSWORDS,
        prober=Prober(engine, SEALER, providers, delays_s=(300.0,)),
        payments=Payments(engine, SEALER, None),
    )
    loaded = schemathesis.openapi.from_asgi("/openapi.json", create_admin(state))
    _with_seeded_rows(loaded, seeded)
    return loaded


def _fuzz(
    schema: BaseSchema,
    call: Callable[[Case[Any]], None],
    modes: Iterable[GenerationMode],
    max_examples: int,
) -> list[str]:
    """Run `call` on generated cases of every operation; what failed, one line per operation
    (every operation runs, so one run shows every problem). One Hypothesis test per operation,
    as `schema.parametrize()` would make: its lazy form (a schema from a fixture, which the
    database needs) fails on pytest 9 (it sets `node._nodeid`), so the loop is ours."""
    problems: list[str] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # the document itself is broken
            problems.append(f"{type(result.err()).__name__}: {result.err()}")
            continue
        operation = result.ok()
        strategy = st.one_of([operation.as_strategy(generation_mode=mode) for mode in modes])

        @settings(FUZZ, max_examples=max_examples)
        @given(case=strategy)
        def run(case: Case[Any]) -> None:
            call(case)

        try:
            run()
        # A check's failure, or the app's own exception (the in-process transport raises
        # what a server would log under its 500): a finding about this operation either way.
        except (Exception, FailureGroup) as exc:  # noqa: BLE001
            problems.append(f"{operation.label}: {_described(exc)}")
    return problems


def _described(exc: BaseException) -> str:
    """The exception and what it groups (Hypothesis's FlakyFailure names only its count)."""
    text = f"{type(exc).__name__}: {exc}"
    for inner in getattr(exc, "exceptions", ()):
        text += "\n  - " + _described(inner).replace("\n", "\n    ")
    return text


#: Not run: positive_data_acceptance (a schema-valid request must not get 400). The API has
#: rules a JSON schema cannot state, so such a 400 is right: an opaque cursor it did not give,
#: a reference by name to a row that does not exist (`routes[0].provider`, the usage filters),
#: one-of-two-fields rules, a password change asked by the admin token (no account). The
#: other direction, negative_data_rejection (schema-invalid input must be refused), runs.
NOT_APPLICABLE: list[CheckFunction] = [checks.positive_data_acceptance, not_a_server_error]


def no_undocumented_server_error(_ctx: CheckContext, response: Response, case: Case[Any]) -> None:
    """Schemathesis's not_a_server_error fails every 5xx. A 5xx the route itself documents is
    its answer, not a crash: 503 from the top-up and refund routes without Stripe
    (docs/billing.md), 502 when Stripe refused. Not the 503 every route documents (the database
    or key not open yet: both are open here), and never a 500. Which cases reach such a route is
    not fixed by `derandomize`: Hypothesis also draws constants from the modules the process has
    imported, so a test order changes the cases (a random order found the checkout's 503)."""
    status = response.status_code
    if status < 500:
        return
    declared = case.operation.definition.raw.get("responses", {}).get(str(status), {})
    common = ERRORS.get(status, {}).get("description")
    if status == 500 or declared.get("description") in (None, common):
        raise AssertionError(f"{case.operation.label}: an undocumented {status}: {response.text}")


def _conforms(case: Case[Any]) -> None:
    case.call_and_validate(
        headers=AUTH,
        excluded_checks=NOT_APPLICABLE,
        additional_checks=[no_undocumented_server_error],
    )


#: Every operation's cases in one test: about 50 s on an idle core, several minutes on a loaded
#: machine, where pytest-timeout's 120 s struck inside a case (which Hypothesis then reported as
#: a FlakyFailure of whatever operation was running).
LONG_RUN_S = 900


@pytest.mark.timeout(LONG_RUN_S)
def test_every_operation_conforms(admin_schema: BaseSchema) -> None:
    problems = _fuzz(admin_schema, _conforms, list(GenerationMode), MAX_EXAMPLES)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_documented_503_conforms_and_an_undocumented_5xx_does_not(
    admin_schema: BaseSchema, seeded: dict[str, str]
) -> None:
    """The case a random order drew: a valid top-up of a real tenant, Stripe not configured."""
    checkout = admin_schema["/billing/{tenant_id}/checkout"]["POST"]
    case = checkout.Case(
        path_parameters={"tenant_id": seeded["tenant_id"]},
        headers={"If-Match": "*"},
        body={"amount_usd": "20"},
        media_type="application/json",
    )
    response = case.call(headers=AUTH)
    assert response.status_code == 503, response.text
    assert "Stripe" in response.json()["error"]["message"]
    _conforms(case)
    undocumented = admin_schema["/tenants"]["GET"].Case()
    with pytest.raises(AssertionError, match="an undocumented 503"):
        no_undocumented_server_error(None, response, undocumented)  # type: ignore[arg-type]


#: Refused before any query runs, so one database shows it.
@pytest.mark.timeout(LONG_RUN_S)
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_operation_needs_credentials(admin_schema: BaseSchema) -> None:
    def call(case: Case[Any]) -> None:
        response = case.call_and_validate()
        assert response.status_code == 401, response.text
        assert response.json()["error"]["type"] == "authentication_error"

    public = [route.path for route in ROUTES if route.kind == "public"]  # sign-in, sign-up...
    guarded = admin_schema.exclude(path=public)
    problems = _fuzz(guarded, call, [GenerationMode.POSITIVE], 2)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        # a budget past what integer micro-USD hold was a 500 (decimal.InvalidOperation)
        ("/projects", {"name": "big", "monthly_budget_usd": 10**30}, "monthly_budget_usd"),
        ("/projects", {"name": "big", "limits": {"rpm": 2**40}}, "limits.rpm"),
        (
            "/models",
            {"name": "m", "routes": [{"provider": "p", "upstream_model": "x", "priority": 2**40}]},
            "routes[0].priority",
        ),
    ],
)
async def test_found_numbers_too_large_to_store_are_refused(
    admin: httpx.AsyncClient, path: str, body: dict[str, Any], field: str
) -> None:
    assert_error(await admin.post(path, json=body), 400, field)


@pytest.mark.parametrize("path", ["/audit", "/usage/summary"])
async def test_found_a_number_is_not_a_moment(admin: httpx.AsyncClient, path: str) -> None:
    """Pydantic read `since=0` as 1970 (Unix time); the API takes ISO 8601 only."""
    assert_error(await admin.get(path, params={"since": "0.0"}), 400, "since")
    assert (await admin.get(path, params={"since": "2026-01-01T00:00:00"})).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/tenants", {"slug": "nul", "name": "a\x00b"}, "name"),
        ("/users", {"email": "a\x00@b.test", "password": "x" * 16}, "email"),
        ("/users", {"email": "a@b.test", "password": "x" * 16, "name": "a\x1b[2J"}, "name"),
    ],
)
async def test_found_control_characters_are_refused_on_every_database(
    admin: httpx.AsyncClient, path: str, body: dict[str, Any], field: str
) -> None:
    """SQLite stored a NUL in a tenant's or user's name (PostgreSQL refused it): both 400."""
    assert_error(await admin.post(path, json=body), 400, field)
