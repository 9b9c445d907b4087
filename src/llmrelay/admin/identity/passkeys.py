"""The rules of passkeys (WebAuthn, with the `webauthn` library): the relying party from
LLMRELAY_PUBLIC_URL, the options of a registration or a sign-in, and the checks of what the
browser answers.

A ceremony's challenge is 32 random bytes kept server side as their SHA-256, for its purpose
(register, login: password-less, second: after a password) and its user, for CHALLENGE_S. The
browser's answer names its challenge (in clientDataJSON); it is consumed, in a transaction of
its own, before anything else is checked: whatever follows, it never answers twice, on any
replica. Functions take the caller's database session and never commit (but that one)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import bytes_to_base64url, options_to_json_dict
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity import passkey_repository as repository
from llmrelay.store.db import session_factory
from llmrelay.store.models_access import User
from llmrelay.store.models_passkeys import Passkey
from llmrelay.store.types import utcnow

#: How long the browser has to answer a ceremony's options.
CHALLENGE_S = 300
RP_NAME = "llmrelay"
#: A user's passkeys at most (each one is a way into the account).
MOST_PER_USER = 20

REGISTER, LOGIN, SECOND = "register", "login", "second"


class PasskeyRefused(AdminError):
    """A sign-in with a passkey that does not prove the user: counts towards throttling."""

    def __init__(self, message: str) -> None:
        super().__init__(401, message, "passkey_invalid", "credential")


@dataclass(frozen=True, slots=True)
class RelyingParty:
    """What the browser binds a passkey to: the console's host name (the RP id) and the
    origin its pages are served from."""

    id: str
    origin: str


def relying_party(public_url: str | None) -> RelyingParty:
    """The relying party of LLMRELAY_PUBLIC_URL; 409 when it is not set (a Host header must
    never decide which site a passkey belongs to)."""
    if public_url is None:
        raise AdminError(
            409,
            "passkeys need LLMRELAY_PUBLIC_URL (the console's address as users reach it)",
            "passkeys_unavailable",
        )
    parts = urlsplit(public_url)
    host = parts.hostname or ""
    return RelyingParty(id=host, origin=f"{parts.scheme}://{parts.netloc}")


def _digest(challenge: bytes) -> str:
    return hashlib.sha256(challenge).hexdigest()


async def _issue(session: AsyncSession, purpose: str, user_id: str | None) -> bytes:
    now = utcnow()
    await repository.prune_challenges(session, now)
    challenge = secrets.token_bytes(32)
    expires = now + timedelta(seconds=CHALLENGE_S)
    await repository.add_challenge(session, _digest(challenge), purpose, user_id, expires)
    return challenge


def _descriptors(passkeys: list[Passkey]) -> list[PublicKeyCredentialDescriptor]:
    found = []
    for passkey in passkeys:
        transports = [
            AuthenticatorTransport(t)
            for t in passkey.transports or ()
            if t in AuthenticatorTransport._value2member_map_
        ]
        found.append(
            PublicKeyCredentialDescriptor(id=_bytes(passkey.credential_id), transports=transports)
        )
    return found


async def registration_options(
    session: AsyncSession, rp: RelyingParty, user: User
) -> dict[str, Any]:
    """The options of navigator.credentials.create(): a discoverable credential is asked
    for (it can then sign in without a password), the user's passkeys are excluded."""
    owned = list(await repository.of_user(session, user.id))
    if len(owned) >= MOST_PER_USER:
        raise AdminError(409, f"at most {MOST_PER_USER} passkeys per account", "conflict")
    options = generate_registration_options(
        rp_id=rp.id,
        rp_name=RP_NAME,
        user_id=user.id.encode(),
        user_name=user.email,
        user_display_name=user.name or user.email,
        challenge=await _issue(session, REGISTER, user.id),
        timeout=CHALLENGE_S * 1000,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.PREFERRED,
        ),
        exclude_credentials=_descriptors(owned),
    )
    return options_to_json_dict(options)


async def authentication_options(
    session: AsyncSession, rp: RelyingParty, user: User | None
) -> dict[str, Any]:
    """The options of navigator.credentials.get(): for `user` (a second factor after its
    password) its own passkeys; else any discoverable one, with user verification (the
    passkey is then both factors)."""
    allowed: list[PublicKeyCredentialDescriptor] = []
    if user is not None:
        allowed = _descriptors(list(await repository.of_user(session, user.id)))
        if not allowed:
            raise AdminError(409, "this account has no passkey", "conflict")
    options = generate_authentication_options(
        rp_id=rp.id,
        challenge=await _issue(session, LOGIN if user is None else SECOND, _id(user)),
        timeout=CHALLENGE_S * 1000,
        allow_credentials=allowed,
        user_verification=(
            UserVerificationRequirement.REQUIRED
            if user is None
            else UserVerificationRequirement.PREFERRED
        ),
    )
    return options_to_json_dict(options)


def _id(user: User | None) -> str | None:
    return None if user is None else user.id


def _bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _challenge_of(credential: dict[str, Any]) -> bytes:
    """The challenge the browser signed (in the answer's clientDataJSON)."""
    try:
        client_data = orjson.loads(_bytes(str(credential["response"]["clientDataJSON"])))
        return _bytes(str(client_data["challenge"]))
    except (KeyError, TypeError, ValueError, binascii.Error, orjson.JSONDecodeError):
        raise AdminError(
            400,
            "credential: not a WebAuthn answer (response.clientDataJSON with a challenge)",
            field="credential",
        ) from None


async def take_challenge(
    engine: AsyncEngine, credential: dict[str, Any], purpose: str, user_id: str | None
) -> bytes:
    """The answer's challenge, consumed: 400 when this server never issued it for this
    purpose and user, when it was used already, or when it expired."""
    challenge = _challenge_of(credential)
    digest = _digest(challenge)
    async with session_factory(engine)() as session, session.begin():
        row = await repository.challenge(session, digest)
        if row is None or row.purpose != purpose or row.user_id != user_id:
            raise AdminError(
                400,
                "credential: unknown or already used challenge: ask for new options",
                "challenge_invalid",
                "credential",
            )
        expired = row.expires_at <= utcnow()
        if not await repository.consume_challenge(session, digest):
            raise AdminError(
                400, "credential: the challenge was already used", "challenge_invalid", "credential"
            )
    if expired:
        raise AdminError(
            400,
            f"credential: the challenge expired ({CHALLENGE_S} s): ask for new options",
            "challenge_invalid",
            "credential",
        )
    return challenge


def _name(name: str | None, owned: int) -> str:
    name = (name or "").strip()
    return name[:100] if name else f"Passkey {owned + 1}"


async def register(
    engine: AsyncEngine,
    session: AsyncSession,
    rp: RelyingParty,
    user: User,
    credential: dict[str, Any],
    name: str | None,
) -> Passkey:
    """Check a registration answer ('none' attestation is enough: the account's password or
    session already says who registers) and keep the new passkey."""
    challenge = await take_challenge(engine, credential, REGISTER, user.id)
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=rp.id,
            expected_origin=rp.origin,
        )
    except (WebAuthnException, ValueError, TypeError, KeyError) as exc:
        raise AdminError(400, f"credential: {exc}", "passkey_invalid", "credential") from None
    credential_id = bytes_to_base64url(verified.credential_id)
    if await repository.by_credential_id(session, credential_id) is not None:
        raise AdminError(409, "credential: this passkey is registered already", "conflict")
    transports = credential.get("response", {}).get("transports")
    passkey = Passkey(
        user_id=user.id,
        credential_id=credential_id,
        public_key=bytes_to_base64url(verified.credential_public_key),
        sign_count=verified.sign_count,
        name=_name(name, await repository.count_of_user(session, user.id)),
        transports=[str(t) for t in transports][:8] if isinstance(transports, list) else None,
        created_at=utcnow(),
    )
    session.add(passkey)
    await session.flush()
    return passkey


async def authenticate(
    engine: AsyncEngine,
    session: AsyncSession,
    rp: RelyingParty,
    credential: dict[str, Any],
    user: User | None,
) -> Passkey:
    """The passkey a sign-in answer proves (and its counter moved on), for `user` (a second
    factor) or for whoever it belongs to (password-less: user verification required).
    PasskeyRefused for an unknown passkey, another user's, a bad signature or origin, or a
    counter that did not move forward (a cloned authenticator)."""
    challenge = await take_challenge(
        engine, credential, LOGIN if user is None else SECOND, _id(user)
    )
    credential_id = str(credential.get("id") or credential.get("rawId") or "")
    passkey = await repository.by_credential_id(session, credential_id) if credential_id else None
    if passkey is None or (user is not None and passkey.user_id != user.id):
        raise PasskeyRefused("credential: unknown passkey")
    handle = credential.get("response", {}).get("userHandle")
    if handle and _user_handle(str(handle)) != passkey.user_id:
        raise PasskeyRefused("credential: the passkey names another user")
    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=rp.id,
            expected_origin=rp.origin,
            credential_public_key=_bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=user is None,
        )
    except (WebAuthnException, ValueError, TypeError, KeyError) as exc:
        raise PasskeyRefused(f"credential: {exc}") from None
    moved = await repository.advance(
        session, passkey.id, passkey.sign_count, verified.new_sign_count, utcnow()
    )
    if not moved:
        raise PasskeyRefused("credential: the passkey's signature counter went backwards")
    return passkey


def _user_handle(handle: str) -> str | None:
    try:
        return _bytes(handle).decode()
    except (ValueError, binascii.Error):
        return None
