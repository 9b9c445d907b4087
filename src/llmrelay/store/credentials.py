"""A provider's credentials as stored: sealed JSON (`{"api_key", "headers"}`) bound to the
provider's id. Here, not in the admin service that writes them, because the snapshot builder
(data plane) opens them too and must not import the control plane."""

from __future__ import annotations

from typing import Any

import orjson

from llmrelay.store.crypto import Sealer
from llmrelay.store.models import Provider


def open_credentials(row: Provider, sealer: Sealer) -> dict[str, Any] | None:
    """The provider's credentials, None when it has none; CredentialError when the
    configured keys cannot open them."""
    if row.credentials_sealed is None:
        return None
    opened: dict[str, Any] = orjson.loads(sealer.open(row.credentials_sealed, context=row.id))
    return opened
