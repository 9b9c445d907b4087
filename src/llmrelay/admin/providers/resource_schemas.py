"""What the provider resources API answers with (requests are the config schema's
ResourceConfig). Credentials are write-only, as a provider's: whether a key is set, its
last four characters and the names of the extra headers."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from llmrelay.store.credentials import open_credentials
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.models import ProviderResource


class ResourceOut(BaseModel):
    id: str
    provider_id: str
    name: str
    priority: int
    weight: float
    disabled: bool
    rpm: int | None
    tpm: int | None
    api_key_set: bool
    api_key_last_four: str | None
    header_names: list[str]
    #: False when the stored credentials cannot be opened with the current secret key.
    credentials_readable: bool
    #: "disabled" (the administrator's switch), else this replica's breaker of the
    #: resource: "closed", "open" (cooling down) or "half_open" (a trial in flight).
    health: str
    version: int
    created_at: datetime
    updated_at: datetime


class ResourcePage(BaseModel):
    data: list[ResourceOut]


def resource_out(row: ProviderResource, sealer: Sealer, breaker_state: str) -> ResourceOut:
    try:
        credentials = open_credentials(row, sealer) or {}
        readable = True
    except CredentialError:
        credentials, readable = {}, False
    return ResourceOut(
        id=row.id,
        provider_id=row.provider_id,
        name=row.name,
        priority=row.priority,
        weight=row.weight,
        disabled=row.disabled,
        rpm=row.rpm,
        tpm=row.tpm,
        api_key_set=row.api_key_last_four is not None or bool(credentials.get("api_key")),
        api_key_last_four=row.api_key_last_four,
        header_names=sorted(credentials.get("headers") or {}),
        credentials_readable=readable,
        health="disabled" if row.disabled else breaker_state,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
