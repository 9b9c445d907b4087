"""Passkeys (WebAuthn credentials) of console users and the challenges of their ceremonies
(migration 0024). On store/models.py's `Base`, so one metadata holds the whole schema.

A passkey keeps only what verifying its signatures needs: the credential id, its COSE public
key and the authenticator's signature counter. A challenge is kept as the SHA-256 of its
random bytes, with its purpose, its user (when it has one) and its end: it is consumed by
deleting the row, so it answers once, on any replica."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base, new_id
from llmrelay.store.types import JSONDoc, utcnow


class Passkey(Base):
    __tablename__ = "passkeys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    #: The credential id, base64url (at most 1,023 bytes by the WebAuthn spec).
    credential_id: Mapped[str] = mapped_column(String(1400), unique=True)
    #: The COSE public key, base64url.
    public_key: Mapped[str] = mapped_column(Text)
    #: The authenticator's signature counter last seen: one that goes backwards is refused.
    sign_count: Mapped[int] = mapped_column(BigInteger, default=0)
    name: Mapped[str] = mapped_column(String(100))
    #: How the browser may reach the authenticator (usb, internal, hybrid...), as it said.
    transports: Mapped[list[str] | None] = mapped_column(JSONDoc, nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]


class PasskeyChallenge(Base):
    __tablename__ = "passkey_challenges"

    #: SHA-256 (hex) of the challenge's bytes.
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: register | login (password-less) | second (second factor after a password)
    purpose: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    expires_at: Mapped[datetime] = mapped_column(index=True)
