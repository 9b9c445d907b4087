"""Listing a provider's models over real HTTP, in each provider's own request and answer
shapes (the mock upstream checks headers and pages its lists), and in process for `mock`."""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType

import pytest

from llmrelay.providers.errors import UpstreamConnectError
from llmrelay.providers.model_list import list_models
from llmrelay.snapshot.model import ProviderSnap
from tests.jobs.ops_support import registry
from tests.support.mock_upstream import LISTED_MODELS, MockUpstream
from tests.support.ports import free_port

KEY = "sk-listing-key-0123456789"


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    server = MockUpstream().start()
    yield server
    server.stop()


def provider(kind: str, base_url: str | None, api_key: str | None = KEY) -> ProviderSnap:
    return ProviderSnap(
        id=f"p-{kind}",
        slug=kind,
        type=kind,
        base_url=base_url,
        api_key=api_key,
        headers=MappingProxyType({"x-team": "ops"}),
        timeout_s=5,
        connect_timeout_s=2,
        first_token_timeout_s=5,
        stream_idle_timeout_s=5,
        api_version=None,
    )


@pytest.mark.parametrize(
    ("kind", "path", "credential"),
    [
        ("openai_compatible", "/v1/models", ("authorization", f"Bearer {KEY}")),
        ("anthropic", "/v1/models", ("x-api-key", KEY)),
        ("gemini", "/v1beta/models", ("x-goog-api-key", KEY)),
        ("azure_openai", "/openai/models", ("api-key", KEY)),
    ],
)
async def test_each_provider_type_lists_every_page(
    upstream: MockUpstream, kind: str, path: str, credential: tuple[str, str]
) -> None:
    base = upstream.base_url if kind == "openai_compatible" else upstream.root_url
    upstream.listings.clear()
    async with registry() as providers:
        listing = await list_models(providers, provider(kind, base), all_pages=True)
    assert listing.status == 200 and listing.detail is None
    assert listing.models is not None
    assert [m.id for m in listing.models] == list(LISTED_MODELS)
    assert {r.path for r in upstream.listings} == {path}
    paged = kind in ("anthropic", "gemini")  # two models a page: two pages
    assert len(upstream.listings) == (2 if paged else 1)
    first = {k.lower(): v for k, v in upstream.listings[0].headers.items()}
    name, value = credential
    assert first[name] == value and first["x-team"] == "ops"
    assert KEY not in str(upstream.listings[0].query)  # never in the URL
    if kind == "anthropic":
        assert first["anthropic-version"] == "2023-06-01"
        assert listing.models[0].display_name == LISTED_MODELS[0].title()
    if kind == "gemini":
        assert listing.models[0].context_window == 1_048_576
        assert listing.models[0].max_output == 65_536
    if kind == "azure_openai":
        assert upstream.listings[0].query["api-version"] == "2024-10-21"


async def test_a_probe_reads_one_page_only(upstream: MockUpstream) -> None:
    upstream.listings.clear()
    async with registry() as providers:
        listing = await list_models(providers, provider("anthropic", upstream.root_url))
    assert listing.models is not None and len(listing.models) == 2
    assert len(upstream.listings) == 1


@pytest.mark.parametrize(
    ("kind", "status"),
    [("openai_compatible", 401), ("anthropic", 401), ("azure_openai", 401), ("gemini", 400)],
)
async def test_refused_credentials_are_told_apart(
    upstream: MockUpstream, kind: str, status: int
) -> None:
    """Gemini refuses a bad key with 400 (API_KEY_INVALID), the others with 401."""
    base = upstream.base_url if kind == "openai_compatible" else upstream.root_url
    upstream.refused_keys.add("revoked-key-0123456789")
    try:
        async with registry() as providers:
            listing = await list_models(
                providers, provider(kind, base, api_key="revoked-key-0123456789")
            )
    finally:
        upstream.refused_keys.clear()
    assert (listing.status, listing.models, listing.credentials_refused) == (status, None, True)
    assert listing.detail


async def test_a_failing_list_keeps_its_status(upstream: MockUpstream) -> None:
    upstream.models_status = 503
    try:
        async with registry() as providers:
            listing = await list_models(providers, provider("openai_compatible", upstream.base_url))
    finally:
        upstream.models_status = None
    assert (listing.status, listing.models, listing.credentials_refused) == (503, None, False)


async def test_an_unreachable_provider_raises_the_providers_error() -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    async with registry() as providers:
        with pytest.raises(UpstreamConnectError):
            await list_models(providers, provider("openai", dead))


async def test_the_mock_provider_answers_in_process() -> None:
    async with registry() as providers:
        listing = await list_models(providers, provider("mock", None, api_key=None))
    assert listing.status == 200
    assert listing.models is not None
    assert [m.id for m in listing.models] == ["mock-chat", "mock-embedding"]
