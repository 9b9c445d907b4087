"""The rules of signing in and of a user's own credentials: throttling, password and
two-factor checks, session rotation and revocation. Functions take the caller's database
session and never commit: the endpoint's unit of work does (sign-in failures are the one
exception, see `sign_in`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity import credentials, passkeys, repository, sessions
from llmrelay.admin.identity import passkey_repository as passkey_rows
from llmrelay.admin.identity.credentials import Passwords
from llmrelay.admin.identity.credentials import normalize_email as normalize_email
from llmrelay.admin.state import SessionPolicy
from llmrelay.store.crypto import Sealer
from llmrelay.store.models_access import User
from llmrelay.store.types import utcnow

WRONG_CREDENTIALS = "wrong email or password"


class Throttled(AdminError):
    def __init__(self, retry_after_s: int, what: str) -> None:
        super().__init__(
            429,
            f"too many failed sign-ins {what}: try again in {retry_after_s} s",
            "rate_limited",
            headers={"Retry-After": str(retry_after_s)},
        )
        self.retry_after_s = retry_after_s


class SignInFailed(AdminError):
    """A failed attempt that counts towards throttling (wrong password or code)."""

    def __init__(self, message: str = WRONG_CREDENTIALS, kind: str = "authentication_error"):
        super().__init__(401, message, kind)


@dataclass(frozen=True, slots=True)
class SignIn:
    email: str
    password: str
    totp_code: str | None
    recovery_code: str | None
    ip: str | None
    user_agent: str | None
    #: The session cookie the client already had, if any: ended, never reused.
    previous_token: str | None
    #: A passkey's answer to /auth/passkeys/login/options (with the email and password), as
    #: the second factor; checked against `public_url`'s relying party in `engine`.
    passkey: dict[str, Any] | None = None
    public_url: str | None = None
    engine: AsyncEngine | None = None


async def check_throttle(
    session: AsyncSession, policy: SessionPolicy, email: str | None, ip: str | None, now: datetime
) -> None:
    """429 once the account (when known) or the address failed too often lately."""
    window = timedelta(seconds=policy.throttle_window_s)
    checks: list[tuple[str, int, dict[str, str]]] = []
    if email is not None:
        checks.append(("for this account", policy.max_failures_per_account, {"email": email}))
    if ip is not None:
        checks.append(("from this address", policy.max_failures_per_ip, {"ip": ip}))
    for what, most, where in checks:
        count, oldest = await repository.failures_since(session, now - window, **where)
        if count >= most and oldest is not None:
            wait = (oldest + window - now).total_seconds()
            raise Throttled(max(1, math.ceil(wait)), what)


async def record_failure(
    session: AsyncSession, policy: SessionPolicy, email: str, ip: str | None
) -> None:
    now = utcnow()
    await repository.add_failure(session, email, ip, now)
    await repository.prune_failures(session, now - timedelta(seconds=policy.throttle_window_s * 4))


async def authenticate_user(
    session: AsyncSession,
    policy: SessionPolicy,
    passwords: Passwords,
    sealer: Sealer | None,
    attempt: SignIn,
) -> User:
    """The user the credentials prove, or SignInFailed (to be recorded by the caller, in its
    own transaction) / Throttled / 403 for a disabled or pending (not activated) account:
    said only to someone who knows the password. An account with two-factor (TOTP, or a
    passkey) needs its second factor too."""
    user = await password_user(session, policy, passwords, attempt)
    if await has_second_factor(session, user):
        await second_factor(
            session,
            sealer,
            user,
            attempt.totp_code,
            attempt.recovery_code,
            passkey=attempt.passkey,
            public_url=attempt.public_url,
            engine=attempt.engine,
        )
    return user


async def has_second_factor(session: AsyncSession, user: User) -> bool:
    """TOTP is on, or the user has a passkey: a password alone no longer signs in."""
    return user.totp_enabled or await passkey_rows.count_of_user(session, user.id) > 0


async def password_user(
    session: AsyncSession, policy: SessionPolicy, passwords: Passwords, attempt: SignIn
) -> User:
    """The active user whose email and password these are (the first step of a sign-in)."""
    email = normalize_email(attempt.email)
    await check_throttle(session, policy, email, attempt.ip, utcnow())
    user = await repository.user_by_email(session, email)
    # argon2 runs whether or not the account exists: the answer's timing says nothing.
    if not passwords.verify(user.password_hash if user else None, attempt.password):
        raise SignInFailed()
    assert user is not None
    check_active(user)
    if passwords.needs_rehash(user.password_hash):
        user.password_hash = passwords.hash(attempt.password)
    return user


def check_active(user: User) -> None:
    """403 for a disabled or pending (not activated) account."""
    if user.disabled:
        raise AdminError(403, "this account is disabled", "account_disabled")
    if user.pending:
        raise AdminError(
            403,
            "this account is not active yet: follow the link in its invitation or "
            "verification mail (or ask for a password reset, which sends a new link)",
            "account_pending",
        )


async def second_factor(
    session: AsyncSession,
    sealer: Sealer | None,
    user: User,
    totp_code: str | None,
    recovery_code: str | None,
    *,
    passkey: dict[str, Any] | None = None,
    public_url: str | None = None,
    engine: AsyncEngine | None = None,
) -> None:
    """A current TOTP code (never one used before), an unused recovery code, or the answer
    of one of the user's passkeys to a challenge issued for it."""
    if not totp_code and not recovery_code and not passkey:
        raise AdminError(
            401,
            "two-factor authentication is on for this account: send totp_code, a "
            "recovery_code, or a passkey (its options: POST /auth/passkeys/login/options "
            "with the email and password)",
            "totp_required",
        )
    now = utcnow()
    if passkey:
        if engine is None:
            raise AdminError(503, "the database is not open yet", "unavailable")
        rp = passkeys.relying_party(public_url)
        try:
            await passkeys.authenticate(engine, session, rp, passkey, user)
        except passkeys.PasskeyRefused as exc:
            raise SignInFailed(exc.message, exc.kind) from None
        return
    if totp_code:
        if not user.totp_enabled:
            raise SignInFailed("wrong or already used two-factor code")
        secret = open_totp_secret(sealer, user)
        step = credentials.totp_step(secret, totp_code, user.totp_last_step)
        if step is None:
            raise SignInFailed("wrong or already used two-factor code")
        # A plain UPDATE: remembering the step is no edit of the user (version unchanged).
        await session.execute(update(User).where(User.id == user.id).values(totp_last_step=step))
        return
    assert recovery_code is not None
    code = credentials.normalize_recovery_code(recovery_code)
    if not await repository.use_recovery_code(session, user.id, credentials.digest(code), now):
        raise SignInFailed("wrong or already used recovery code")


def open_totp_secret(sealer: Sealer | None, user: User) -> str:
    if sealer is None:
        raise AdminError(503, "the secret key is not loaded yet", "unavailable")
    if user.totp_secret_sealed is None:
        raise AdminError(409, "two-factor authentication is not set up", "conflict")
    return sealer.open(user.totp_secret_sealed, context=user.id).decode()


async def end_session_of_token(session: AsyncSession, token: str | None) -> None:
    """End the session a cookie names, if any (sign-out, or a sign-in replacing it)."""
    if not token:
        return
    found = await repository.session_with_user(session, credentials.digest(token))
    if found is not None:
        await repository.revoke_session(session, found[0].id, utcnow())


async def change_password(
    session: AsyncSession,
    policy: SessionPolicy,
    passwords: Passwords,
    user: User,
    current: str,
    new: str,
    ip: str | None,
    user_agent: str | None,
) -> sessions.Started:
    """Check the current password, set the new one, end every session of the user (the
    calling one too) and start a fresh one for the caller."""
    if not passwords.verify(user.password_hash, current):
        raise AdminError(
            403, "current_password: wrong password", "permission_error", "current_password"
        )
    check_password(new, "new_password")
    if passwords.verify(user.password_hash, new):
        raise AdminError(
            400, "new_password: must differ from the current one", field="new_password"
        )
    now = utcnow()
    user.password_hash = passwords.hash(new)
    user.password_changed_at = now
    user.password_change_required = False
    await repository.revoke_sessions_of(session, user.id, now)
    return await sessions.start(session, policy, user.id, ip, user_agent)


def check_password(password: str, field: str) -> None:
    if len(password) < credentials.MIN_PASSWORD_LENGTH:
        raise AdminError(
            400,
            f"{field}: at least {credentials.MIN_PASSWORD_LENGTH} characters",
            field=field,
        )


async def totp_setup(sealer: Sealer, user: User) -> tuple[str, str]:
    """A new secret (kept sealed, not yet in force) and its otpauth:// URI."""
    if user.totp_enabled:
        raise AdminError(
            409, "two-factor authentication is already on: disable it first", "conflict"
        )
    secret = credentials.new_totp_secret()
    user.totp_secret_sealed = sealer.seal(secret.encode(), context=user.id)
    return secret, credentials.totp_uri(secret, user.email)


async def totp_enable(session: AsyncSession, sealer: Sealer, user: User, code: str) -> list[str]:
    """Turn two-factor on once a code from the new secret checks; the recovery codes are
    returned this once (only their digests are kept)."""
    if user.totp_enabled:
        raise AdminError(409, "two-factor authentication is already on", "conflict")
    if user.totp_secret_sealed is None:
        raise AdminError(409, "call /auth/totp/setup first", "conflict")
    step = credentials.totp_step(open_totp_secret(sealer, user), code, None)
    if step is None:
        raise AdminError(400, "code: wrong two-factor code", field="code")
    user.totp_enabled = True
    user.totp_last_step = step
    codes = credentials.new_recovery_codes()
    await repository.replace_recovery_codes(
        session, user.id, [credentials.digest(c) for c in codes]
    )
    return codes


async def totp_disable(
    session: AsyncSession,
    passwords: Passwords,
    sealer: Sealer,
    user: User,
    password: str,
    code: str | None,
    recovery_code: str | None,
) -> None:
    """Turning two-factor off needs the password and a second factor, like signing in."""
    if not user.totp_enabled:
        raise AdminError(409, "two-factor authentication is not on", "conflict")
    if not passwords.verify(user.password_hash, password):
        raise AdminError(403, "password: wrong password", "permission_error", "password")
    try:
        await second_factor(session, sealer, user, code, recovery_code)
    except SignInFailed as exc:
        raise AdminError(403, exc.message, "permission_error") from None
    user.totp_enabled = False
    user.totp_secret_sealed = None
    user.totp_last_step = None
    if await passkey_rows.count_of_user(session, user.id) == 0:  # else still a second factor
        await repository.delete_recovery_codes(session, user.id)
