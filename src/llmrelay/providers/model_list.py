"""Listing a provider's upstream models: its cheapest authenticated endpoint, used by the
health probe (does the credential work? is the provider there?) and by model discovery (what
does it offer?). Off the request path: nothing here is compiled or called per request.

Per provider type:

    openai, openai_compatible  GET {base_url}/models                   Authorization: Bearer
    azure_openai               GET {base_url}/openai/models?api-version=  api-key
                               (the resource's models: the data-plane API lists no deployments)
    anthropic                  GET {base_url}/v1/models?limit=1000     x-api-key, anthropic-version
    gemini                     GET {base_url}/v1beta/models?pageSize=1000   x-goog-api-key
    openai_codex               GET {base_url}/models?client_version=   the account's token
                               (signed by providers/codex/transport.py)
    mock                       answered in process (providers/mock.py)

The request goes through the provider's transport (the shared connection pool, no redirects,
its connect and first-byte limits), so transport failures arrive as providers.errors, mapped
where they always are. An answer that is not 2xx is returned with its status and a one-line
the provider's message (`Listing`); the caller decides what it means.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode

import orjson

from llmrelay.protocols.openai import upstream_error_message
from llmrelay.providers.anthropic import ANTHROPIC_VERSION
from llmrelay.providers.azure import DEFAULT_API_VERSION
from llmrelay.providers.base import UpstreamRequest
from llmrelay.providers.codex.adapter import CLIENT_VERSION
from llmrelay.providers.errors import UpstreamProtocolError
from llmrelay.providers.mock import MODELS_URL
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.snapshot.model import ProviderSnap

#: The most pages one listing follows (Anthropic and Gemini page their lists; a page holds up
#: to 1000 models, so this is far beyond any real catalogue).
MAX_PAGES: Final = 10


@dataclass(frozen=True, slots=True)
class ListedModel:
    """One model as the provider lists it; what it does not say is None."""

    id: str
    display_name: str | None = None
    context_window: int | None = None
    max_output: int | None = None


@dataclass(frozen=True, slots=True)
class Listing:
    """How the provider answered: its status (the last page's), the models when it answered
    2xx with a list this module could read (None otherwise), its error message when it
    refused (raw: mask it before showing it) or why its list could not be read, and how long
    it took."""

    status: int
    models: tuple[ListedModel, ...] | None
    detail: str | None
    latency_ms: float
    #: Gemini answers an invalid API key with 400 (reason API_KEY_INVALID), not 401.
    credentials_refused: bool = False


class UnlistableProvider(LookupError):
    """The provider's type has no model list this version knows."""


def list_request(provider: ProviderSnap, page: str | None = None) -> UpstreamRequest:
    """The GET that lists the provider's models (the page after `page`, when paged)."""
    kind = provider.type
    base = provider.base_url or ""
    headers = dict(provider.headers)
    key = provider.api_key
    if kind in ("openai", "openai_compatible"):
        if key:
            headers["authorization"] = f"Bearer {key}"
        return _get(f"{base}/models", headers)
    if kind == "azure_openai":
        if key:
            headers["api-key"] = key
        version = quote(provider.api_version or DEFAULT_API_VERSION, safe="")
        return _get(f"{base}/openai/models?api-version={version}", headers)
    if kind == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if key:
            headers["x-api-key"] = key
        query = {"limit": "1000", **({"after_id": page} if page else {})}
        return _get(f"{base}/v1/models?{urlencode(query)}", headers)
    if kind == "gemini":
        if key:
            headers["x-goog-api-key"] = key  # never in the query string (URLs reach logs)
        query = {"pageSize": "1000", **({"pageToken": page} if page else {})}
        return _get(f"{base}/v1beta/models?{urlencode(query)}", headers)
    if kind == "openai_codex":
        return _get(f"{base}/models?client_version={CLIENT_VERSION}", headers)
    if kind == "mock":
        return _get(MODELS_URL, {})
    raise UnlistableProvider(f"provider type {kind!r} has no model list")


def _get(url: str, headers: dict[str, str]) -> UpstreamRequest:
    return UpstreamRequest(url=url, headers=headers, body=b"", method="GET")


async def list_models(
    registry: ProviderRegistry, provider: ProviderSnap, *, all_pages: bool = False
) -> Listing:
    """Ask the provider for its models: one page (a probe), or every page up to MAX_PAGES
    (discovery). Raises providers.errors.UpstreamError when the provider cannot be reached
    or does not answer in time; UnlistableProvider for a type without a list."""
    transport = registry.transport(provider.type)
    started = time.perf_counter()
    found: list[ListedModel] = []
    page: str | None = None
    for _ in range(MAX_PAGES):
        response = await transport.send(list_request(provider, page), provider)
        try:
            body = await response.read()
        finally:
            response.release()
        status = response.status
        if not 200 <= status < 300:
            return Listing(
                status,
                None,
                _message(body),
                _ms(started),
                credentials_refused=status in (401, 403) or _api_key_invalid(body),
            )
        try:
            models, page = _parse(provider.type, body)
        except UpstreamProtocolError as unreadable:
            return Listing(status, None, str(unreadable), _ms(started))
        found.extend(models)
        if page is None or not all_pages:
            break
    return Listing(status, tuple(found), None, _ms(started))


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 1)


def _message(body: bytes) -> str:
    """The provider's error message as it wrote it (its `error.message`, else the start of
    the body): the caller masks credential-looking text before it shows or stores it."""
    return upstream_error_message(body) or body.decode("utf-8", "replace")[:300]


def _api_key_invalid(body: bytes) -> bool:
    """Google's answer to a bad API key: 400 with an ErrorInfo whose reason is
    API_KEY_INVALID."""
    return b"API_KEY_INVALID" in body[:4000]


# -- reading the lists -----------------------------------------------------------------------


def _parse(provider_type: str, body: bytes) -> tuple[list[ListedModel], str | None]:
    """The models of one page, and the cursor of the next page (None: the last)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError("the model list is not JSON") from None
    if not isinstance(parsed, dict):
        raise UpstreamProtocolError("the model list is not a JSON object")
    reader = _READERS.get(provider_type, _openai)
    return reader(parsed)


def _openai(body: dict[str, Any]) -> tuple[list[ListedModel], str | None]:
    return [ListedModel(item["id"]) for item in _items(body, "data", "id")], None


def _anthropic(body: dict[str, Any]) -> tuple[list[ListedModel], str | None]:
    models = [
        ListedModel(item["id"], display_name=_text(item.get("display_name")))
        for item in _items(body, "data", "id")
    ]
    after = body.get("last_id")
    more = body.get("has_more") is True and isinstance(after, str) and after
    return models, after if more else None


def _gemini(body: dict[str, Any]) -> tuple[list[ListedModel], str | None]:
    models = []
    for item in _items(body, "models", "name"):
        name = str(item["name"]).removeprefix("models/")
        models.append(
            ListedModel(
                name,
                display_name=_text(item.get("displayName")),
                context_window=_count(item.get("inputTokenLimit")),
                max_output=_count(item.get("outputTokenLimit")),
            )
        )
    token = body.get("nextPageToken")
    return models, token if isinstance(token, str) and token else None


def _items(body: dict[str, Any], key: str, id_key: str) -> list[dict[str, Any]]:
    items = body.get(key)
    if items is None and key == "models":  # an empty Gemini list omits the field
        return []
    if not isinstance(items, list):
        raise UpstreamProtocolError(f"the model list has no `{key}` list")
    return [
        item
        for item in items
        if isinstance(item, dict) and isinstance(item.get(id_key), str) and item[id_key]
    ]


def _codex(body: dict[str, Any]) -> tuple[list[ListedModel], str | None]:
    """The Codex backend's list: {"models": [{"slug", "display_name", "context_window"}]}."""
    return [
        ListedModel(
            item["slug"],
            display_name=_text(item.get("display_name")),
            context_window=_count(item.get("context_window")),
        )
        for item in _items(body, "models", "slug")
    ], None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


_READERS: Final[dict[str, Callable[[dict[str, Any]], tuple[list[ListedModel], str | None]]]] = {
    "anthropic": _anthropic,
    "gemini": _gemini,
    "openai_codex": _codex,
}
