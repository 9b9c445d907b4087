"""A provider's (or provider resource's) credentials as stored: sealed JSON (`{"api_key",
"headers"}`) bound to the row's id. Here, not in the admin service that writes them,
because the snapshot builder (data plane) opens them too and must not import the control
plane."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from llmrelay.store.crypto import Sealer


class Sealed(Protocol):
    """A row holding sealed credentials: a provider, or one of its resources."""

    @property
    def id(self) -> str: ...

    @property
    def credentials_sealed(self) -> str | None: ...


def open_credentials(row: Sealed, sealer: Sealer) -> dict[str, Any] | None:
    """The provider's credentials, None when it has none; CredentialError when the
    configured keys cannot open them."""
    if row.credentials_sealed is None:
        return None
    opened: dict[str, Any] = orjson.loads(sealer.open(row.credentials_sealed, context=row.id))
    return opened
