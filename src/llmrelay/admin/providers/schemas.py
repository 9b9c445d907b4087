"""What the providers API answers with (requests are the config schema's ProviderConfig).
Credentials are write-only: only whether a key is set, its last four characters and the
names of the extra headers are ever shown."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from llmrelay.store.credentials import open_credentials
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.models import Provider


class ProviderOut(BaseModel):
    id: str
    tenant_id: str
    slug: str
    type: str
    base_url: str | None
    api_key_set: bool
    api_key_last_four: str | None
    #: Names of the extra upstream headers (their values are sealed like the key).
    header_names: list[str]
    #: False when the stored credentials cannot be opened with the current secret key.
    credentials_readable: bool
    timeout_s: float | None
    connect_timeout_s: float | None
    first_token_timeout_s: float | None
    stream_idle_timeout_s: float | None
    api_version: str | None
    region: str | None
    preset: str | None
    version: int
    created_at: datetime
    updated_at: datetime


class ProviderPage(BaseModel):
    data: list[ProviderOut]
    next_cursor: str | None


class Inventory(BaseModel):
    """The upstream models a provider offers: ids, with whatever else was listed."""

    provider_id: str
    models: list[dict[str, Any]] | None
    version: int


def provider_out(row: Provider, sealer: Sealer) -> ProviderOut:
    try:
        credentials = open_credentials(row, sealer) or {}
        readable = True
    except CredentialError:
        credentials, readable = {}, False
    return ProviderOut(
        id=row.id,
        tenant_id=row.tenant_id,
        slug=row.slug,
        type=row.type,
        base_url=row.base_url,
        api_key_set=row.api_key_last_four is not None or bool(credentials.get("api_key")),
        api_key_last_four=row.api_key_last_four,
        header_names=sorted(credentials.get("headers") or {}),
        credentials_readable=readable,
        timeout_s=row.timeout_s,
        connect_timeout_s=row.connect_timeout_s,
        first_token_timeout_s=row.first_token_timeout_s,
        stream_idle_timeout_s=row.stream_idle_timeout_s,
        api_version=row.api_version,
        region=row.region,
        preset=row.preset,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
