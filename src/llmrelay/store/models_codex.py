"""ChatGPT accounts signed in for `openai_codex` providers (migration 0026). On
store/models.py's `Base`, so one metadata holds the whole schema.

One row per signed-in account, keyed by its own id and tied to its provider and to one of the
provider's resources (migration 0030): a provider has as many accounts as it has resources
with an account signed in, each tried, cooled down and quota-limited as a resource (the
resource row holds its priority, weight, rpm, tpm; this row its tokens and usage limits). Kept
apart from `providers.credentials_sealed` because the tokens
change on every refresh (every few days, or sooner), and a provider row's change moves the
config generation and rebuilds every replica's snapshot.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base, Timestamped, new_id


class CodexAccount(Timestamped, Base):
    """A ChatGPT account's OAuth tokens, sealed (store/crypto.py, context = the row's id), and
    what the gateway last learned of its usage limits."""

    __tablename__ = "codex_accounts"
    __table_args__ = (UniqueConstraint("provider_id", "account_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    provider_id: Mapped[str] = mapped_column(
        ForeignKey("providers.id", ondelete="CASCADE"), index=True
    )
    #: The provider resource this account is the credential of (migration 0030; every
    #: sign-in sets it): deleting the resource signs the account out.
    resource_id: Mapped[str | None] = mapped_column(
        ForeignKey("provider_resources.id", ondelete="CASCADE"), index=True, unique=True
    )
    #: The ChatGPT account (workspace) id from the id token's claims: sent upstream as
    #: `chatgpt-account-id` on every call.
    account_id: Mapped[str] = mapped_column(String(200))
    email: Mapped[str | None] = mapped_column(String(320))
    plan_type: Mapped[str | None] = mapped_column(String(32))
    #: The OAuth issuer that gave the tokens (refreshes go back to it) and the client id.
    issuer: Mapped[str] = mapped_column(String(500))
    client_id: Mapped[str] = mapped_column(String(100))
    #: Sealed JSON {"access_token", "refresh_token", "id_token"}.
    tokens_sealed: Mapped[str] = mapped_column(Text)
    tokens_key_id: Mapped[str | None] = mapped_column(String(16))
    #: When the access token expires (its `exp` claim), None when it carries none.
    access_expires_at: Mapped[datetime | None]
    #: Moves on every refresh: a replica refreshes only the tokens it read (compare and
    #: swap), so a refresh token (single use) is never spent twice.
    token_generation: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    refreshed_at: Mapped[datetime | None]
    #: The usage limits last seen (the usage endpoint or a response's x-codex-* headers):
    #: {"primary": {"used_percent", "window_minutes", "resets_at"}, "secondary": {...},
    #:  "plan_type", "seen_at"}.
    limits: Mapped[dict[str, Any] | None]
    #: Until when the account is out of its usage limit: no call is sent before.
    exhausted_until: Mapped[datetime | None]
