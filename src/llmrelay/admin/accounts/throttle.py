"""Throttles of the public account routes (sign-up per client IP; password-reset requests per
address and per IP), kept as rows of `login_failures` marked with a leading `~` (so every
replica counts the same, and sign-in throttling leaves them out: admin/identity/repository.py).
A refused attempt is 429 with Retry-After, and says the same whether or not an account
exists."""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity.repository import ATTEMPT_MARK
from llmrelay.store.models_access import LoginFailure
from llmrelay.store.types import utcnow

SIGNUP = "signup"
PASSWORD_RESET = "password_reset"
VERIFICATION = "verification"


def _mark(action: str, email: str = "") -> str:
    return f"{ATTEMPT_MARK}{action}:{email}"[:320]


async def attempt(
    session: AsyncSession,
    action: str,
    *,
    what: str,
    window_s: float,
    ip: str | None,
    per_ip: int | None,
    email: str | None = None,
    per_account: int | None = None,
) -> None:
    """Count this attempt, or refuse it (429) when the address or the IP made `per_account`
    or `per_ip` of them within the window. The row is written in the caller's transaction:
    the caller commits it, also when the attempt then fails for another reason."""
    now = utcnow()
    since = now - timedelta(seconds=window_s)
    ours = LoginFailure.email.startswith(_mark(action), autoescape=True)
    checks = []
    if email is not None and per_account is not None:
        checks.append(("for this address", per_account, LoginFailure.email == _mark(action, email)))
    if ip is not None and per_ip is not None:
        checks.append(
            (
                "from this address",
                per_ip,
                LoginFailure.email.startswith(_mark(action), autoescape=True)
                & (LoginFailure.ip == ip),
            )
        )
    for where, most, condition in checks:
        count, oldest = (
            await session.execute(
                select(func.count(), func.min(LoginFailure.at)).where(
                    condition, LoginFailure.at >= since
                )
            )
        ).one()
        if count >= most and oldest is not None:
            wait = max(1, math.ceil((oldest + timedelta(seconds=window_s) - now).total_seconds()))
            raise AdminError(
                429,
                f"too many {what} {where}: try again in {wait} s",
                "rate_limited",
                headers={"Retry-After": str(wait)},
            )
    await session.execute(delete(LoginFailure).where(ours, LoginFailure.at < since))
    session.add(LoginFailure(at=now, email=_mark(action, email or ""), ip=ip))
