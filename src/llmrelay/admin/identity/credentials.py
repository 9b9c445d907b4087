"""The secrets of console identity and how each is kept: passwords as argon2 hashes, session
tokens and recovery codes (random, high-entropy) as SHA-256 digests, TOTP codes checked
with pyotp against a secret sealed at rest."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import TYPE_CHECKING

import pyotp

if TYPE_CHECKING:
    from argon2 import PasswordHasher

#: The shortest password accepted (the bootstrap password has the same floor in production).
MIN_PASSWORD_LENGTH = 12
RECOVERY_CODES = 10
TOTP_ISSUER = "llmrelay"


class Passwords:
    """argon2id hashing with one set of parameters (argon2-cffi's defaults, RFC 9106's
    low-memory profile, unless told otherwise: tests use cheap ones). A hash carries its own
    parameters, so hashes made with other ones still verify, and are rehashed at sign-in.
    argon2 is imported at the first use: every serving process holds a Passwords for its admin
    API, which most never use (its cffi bindings are resident memory)."""

    def __init__(
        self, *, time_cost: int = 3, memory_cost: int = 65536, parallelism: int = 4
    ) -> None:
        self._parameters = (time_cost, memory_cost, parallelism)
        self._made: PasswordHasher | None = None
        self._dummy: str | None = None

    @property
    def _hasher(self) -> PasswordHasher:
        if self._made is None:
            from argon2 import PasswordHasher

            time_cost, memory_cost, parallelism = self._parameters
            self._made = PasswordHasher(
                time_cost=time_cost, memory_cost=memory_cost, parallelism=parallelism
            )
        return self._made

    def hash(self, password: str) -> str:
        return self._hasher.hash(password)

    def verify(self, password_hash: str | None, password: str) -> bool:
        """True when `password` matches. With no hash (an unknown account) the same work is
        done against a dummy hash and the answer is False, so a wrong email costs the same
        time as a wrong password and response times do not tell which accounts exist."""
        from argon2.exceptions import InvalidHashError, VerificationError

        if self._dummy is None:
            self._dummy = self._hasher.hash(secrets.token_urlsafe(16))
        try:
            matched = self._hasher.verify(password_hash or self._dummy, password)
        except (VerificationError, InvalidHashError):
            return False
        return matched and password_hash is not None

    def needs_rehash(self, password_hash: str) -> bool:
        return self._hasher.check_needs_rehash(password_hash)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def new_token() -> str:
    """A session token or CSRF token: 256 random bits."""
    return secrets.token_urlsafe(32)


def new_recovery_codes() -> list[str]:
    """Ten codes like `k7q2-m9xd-4hwp` (60 random bits each: a digest is safe to store)."""
    alphabet = "abcdefghjkmnpqrstuvwxyz23456789"
    codes = []
    for _ in range(RECOVERY_CODES):
        raw = "".join(secrets.choice(alphabet) for _ in range(12))
        codes.append(f"{raw[:4]}-{raw[4:8]}-{raw[8:]}")
    return codes


def normalize_recovery_code(code: str) -> str:
    raw = "".join(ch for ch in code.lower() if ch.isalnum())
    return f"{raw[:4]}-{raw[4:8]}-{raw[8:]}"


def new_totp_secret() -> str:
    return pyotp.random_base32()


def totp_uri(secret: str, email: str) -> str:
    return pyotp.TOTP(secret).provisioning_uri(name=email, issuer_name=TOTP_ISSUER)


def totp_step(
    secret: str, code: str, last_step: int | None, now: float | None = None
) -> int | None:
    """The time step `code` belongs to (this one or one either side, for clock drift), or
    None when it matches none or was already used (its step is not after `last_step`)."""
    code = "".join(code.split())
    if not (code.isdigit() and len(code) == 6):
        return None
    totp = pyotp.TOTP(secret)
    moment = time.time() if now is None else now
    current = int(moment // totp.interval)
    for step in (current - 1, current, current + 1):
        if last_step is not None and step <= last_step:
            continue
        if secrets.compare_digest(totp.at(step * totp.interval), code):
            return step
    return None


def normalize_email(email: str) -> str:
    """Accounts are found by email whatever its case or surrounding spaces."""
    return email.strip().lower()
