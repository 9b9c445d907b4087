"""Entries the replicas share when there is no Redis, or while it is down (migration 0022):
stored responses' homes and conversation bindings (shared/store.py). On store/models.py's
`Base`, so one metadata holds the whole schema."""

from __future__ import annotations

from sqlalchemy import Float, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base


class SharedEntry(Base):
    """One short value under a key until `expires_at` (Unix seconds); an expired row is
    ignored when read and deleted by a later write."""

    __tablename__ = "shared_entries"
    __table_args__ = (Index(None, "expires_at"), Index(None, "kind", "expires_at"))

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    #: The key's prefix (`a` bindings, `r` homes, `s` stored responses, `b` breakers): the
    #: breakers' poll reads its few rows by it, never the bindings.
    kind: Mapped[str] = mapped_column(String(8))
    value: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[float] = mapped_column(Float)
