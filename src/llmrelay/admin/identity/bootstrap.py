"""The first console account: created once, at `serve` start-up, while no user exists.

LLMRELAY_BOOTSTRAP_ADMIN_EMAIL / _PASSWORD name it. In development with neither set, an
`admin@localhost` account gets a generated password, printed once to stderr (and never
stored in the clear). In production with none set nothing is created: the admin token is the
way in. Replicas starting together are safe: the email is unique, the loser's insert fails
and it moves on."""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass

import structlog
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.admin.identity import repository
from llmrelay.admin.identity.credentials import Passwords, normalize_email
from llmrelay.settings import Environment, Settings
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import User

log = structlog.get_logger(__name__)

DEVELOPMENT_EMAIL = "admin@localhost"


@dataclass(frozen=True, slots=True)
class Bootstrapped:
    user_id: str
    email: str
    #: Set when the password was generated (and printed); None when it came from settings.
    generated_password: str | None


async def ensure_bootstrap_admin(
    engine: AsyncEngine, settings: Settings, passwords: Passwords | None = None
) -> Bootstrapped | None:
    """Create the first platform admin if no user exists; what was created, else None."""
    email = settings.bootstrap_admin_email
    password = settings.bootstrap_admin_password
    generated = None
    if not password:
        if settings.env is Environment.PRODUCTION:
            if email:
                log.warning(
                    "bootstrap_admin_skipped", reason="LLMRELAY_BOOTSTRAP_ADMIN_PASSWORD unset"
                )
            return None
        generated = password = secrets.token_urlsafe(18)
    email = normalize_email(email or DEVELOPMENT_EMAIL)
    async with session_factory(engine)() as session:
        if await repository.count_users(session) > 0:
            return None
        user = User(
            email=email,
            name="Administrator",
            password_hash=(passwords or Passwords()).hash(password),
            platform_admin=True,
        )
        session.add(user)
        try:
            await session.commit()
        except IntegrityError:  # another replica created it first
            return None
    log.info("bootstrap_admin_created", email=email, user_id=user.id)
    if generated is not None:
        print(
            f"llmrelay: created the console account {email} with password {generated}\n"
            "llmrelay: it is shown this once: sign in and change it "
            "(POST /api/admin/auth/password)",
            file=sys.stderr,
            flush=True,
        )
    return Bootstrapped(user.id, email, generated)
