"""The registry of columns that hold values sealed with store/crypto.py.

`llmrelay rotate-secret` (store/rotation.py) re-seals exactly the columns listed in
`SEALED_COLUMNS`, so a new sealed column is one entry here; a column left out would stay
under the old key and stop opening once the old key is dropped.

Tables are named as strings and read with lightweight `table()` constructs, not the ORM
models: the rotation touches only these columns and must not trip the models' version
counters (a re-seal changes no value an administrator could see).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SealedColumn:
    """One column of sealed values.

    `context` turns the row's id (the `id_column` value, as a string) into the context the
    value was sealed with (its associated data): it must be the exact function the writer
    used, or the value cannot be opened. `key_id_column`, when the table has one, is kept
    equal to the sealing key's id.
    """

    table: str
    id_column: str
    sealed_column: str
    context: Callable[[str], str]
    key_id_column: str | None = None

    @property
    def name(self) -> str:
        return f"{self.table}.{self.sealed_column}"


def context_is_id(row_id: str) -> str:
    """The context used by every sealed column so far: the row's own id."""
    return row_id


SEALED_COLUMNS: tuple[SealedColumn, ...] = (
    # Provider credentials: JSON {"api_key", "headers"}, sealed by config/apply.py.
    SealedColumn(
        table="providers",
        id_column="id",
        sealed_column="credentials_sealed",
        context=context_is_id,
        key_id_column="credentials_key_id",
    ),
    # Provider resources' credentials, the same JSON under the resource's id (0024).
    SealedColumn(
        table="provider_resources",
        id_column="id",
        sealed_column="credentials_sealed",
        context=context_is_id,
        key_id_column="credentials_key_id",
    ),
    # Console users' TOTP secrets, sealed by admin/identity/service.py (context: the user id).
    SealedColumn(
        table="users",
        id_column="id",
        sealed_column="totp_secret_sealed",
        context=context_is_id,
    ),
    # Webhook signing secrets, one per project (jobs/webhooks.py; context: the project id).
    SealedColumn(
        table="projects",
        id_column="id",
        sealed_column="webhook_secret_sealed",
        context=context_is_id,
    ),
    # A wallet's saved payment method at Stripe (billing/; context: the tenant id).
    SealedColumn(
        table="wallets",
        id_column="tenant_id",
        sealed_column="payment_method_sealed",
        context=context_is_id,
    ),
    # Mail bodies in the outbox (they can hold sign-in links; context: the message id).
    SealedColumn(
        table="email_outbox", id_column="id", sealed_column="body_sealed", context=context_is_id
    ),
    # ChatGPT accounts' OAuth tokens for openai_codex providers (providers/codex/; context:
    # the account row's id).
    SealedColumn(
        table="codex_accounts",
        id_column="id",
        sealed_column="tokens_sealed",
        context=context_is_id,
        key_id_column="tokens_key_id",
    ),
    # Durable jobs' request bodies and answers (jobs/; context: the job id).
    SealedColumn(
        table="jobs", id_column="id", sealed_column="payload_sealed", context=context_is_id
    ),
    SealedColumn(
        table="jobs", id_column="id", sealed_column="result_sealed", context=context_is_id
    ),
)
