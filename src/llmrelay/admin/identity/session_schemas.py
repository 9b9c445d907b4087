"""Bodies of the session routes: a user's own sessions and an admin's view of someone's."""

from __future__ import annotations

from pydantic import BaseModel


class SessionInfo(BaseModel):
    """One console session still in force. Its token is never shown (only its digest is
    kept); `current` marks the session making this request."""

    id: str
    created_at: str
    last_seen_at: str
    expires_at: str
    ip: str | None
    user_agent: str | None
    current: bool


class SessionList(BaseModel):
    data: list[SessionInfo]


class Revoked(BaseModel):
    """How many sessions were ended."""

    revoked: int
