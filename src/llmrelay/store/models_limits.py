"""The limits' counters in PostgreSQL, for replicas that share a database but no Redis
(migration 0027; limits/postgres.py). The admission and settle are stored functions of the
same migration, so each is one round trip and atomic. On store/models.py's `Base`, so one
metadata holds the whole schema (the tables exist on SQLite too, unused there)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from llmrelay.store.models import Base


class LimitWindow(Base):
    """One second of a scope's rpm and tpm window: a ring of 61 slots per scope (`slot` is
    the second modulo 61), each overwritten when its second comes round again, so a busy
    scope updates rows in place instead of inserting and deleting them."""

    __tablename__ = "limit_windows"

    scope: Mapped[str] = mapped_column(String(200), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    second: Mapped[int] = mapped_column(BigInteger)
    requests: Mapped[int] = mapped_column(BigInteger)
    tokens: Mapped[int] = mapped_column(BigInteger)


class LimitLease(Base):
    """A request in flight in a scope with a concurrency limit or a budget: what it holds of
    the budget until it settles. It lapses at `expires_at` (Unix seconds), renewed while the
    request lives, so a dead replica's leases and holds run out by themselves."""

    __tablename__ = "limit_leases"

    scope: Mapped[str] = mapped_column(String(200), primary_key=True)
    lease: Mapped[str] = mapped_column(String(100), primary_key=True)
    expires_at: Mapped[float] = mapped_column(Float)
    held_micros: Mapped[int] = mapped_column(BigInteger)


class LimitSpend(Base):
    """A scope's settled spend in a UTC month ("YYYY-MM"), micro-USD."""

    __tablename__ = "limit_spend"

    scope: Mapped[str] = mapped_column(String(200), primary_key=True)
    month: Mapped[str] = mapped_column(String(7), primary_key=True)
    spent_micros: Mapped[int] = mapped_column(BigInteger)


class LimitReplica(Base):
    """A replica's heartbeat: how many share the limits if the database goes away."""

    __tablename__ = "limit_replicas"

    replica: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[float] = mapped_column(Float)
