"""The rules of single sign-on. `begin` makes the provider's authorization URL with a fresh
state, nonce and PKCE verifier, sealed for the few minutes the sign-in may take. `finish`
checks the state, exchanges the code (with the verifier), verifies the ID token, and signs the
person in: an account found by its verified email, or made now (just in time), whose
memberships follow the provider's groups on every sign-in. There is no cap on how many
accounts single sign-on makes. Never commits."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import orjson
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.access import Role
from llmrelay.admin.errors import AdminError
from llmrelay.admin.identity.credentials import Passwords, normalize_email
from llmrelay.admin.sso.client import ProviderClient, ProviderFailed
from llmrelay.admin.sso.config import SsoConfig
from llmrelay.admin.sso.schemas import BeginOut, FinishIn
from llmrelay.admin.sso.tokens import TokenRefused, header_of, verify
from llmrelay.admin.users import repository as users
from llmrelay.store.bootstrap import ensure_default_tenant
from llmrelay.store.crypto import CredentialError, Sealer
from llmrelay.store.models import Tenant
from llmrelay.store.models_access import Membership, User
from llmrelay.store.types import utcnow

#: How long a sign-in at the provider may take.
PENDING_S = 600
_CONTEXT = "sso.pending"
#: When several groups grant roles in one tenant, the first of these wins.
RANK = (Role.TENANT_ADMIN, Role.DEVELOPER, Role.BILLING, Role.AUDITOR, Role.VIEWER)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


async def begin(
    config: SsoConfig, client: ProviderClient, sealer: Sealer, redirect_uri: str, next_path: str
) -> BeginOut:
    try:
        endpoint = (await client.discovery())["authorization_endpoint"]
    except ProviderFailed as failed:
        raise AdminError(502, f"the identity provider failed: {failed}", "sso_failed") from None
    state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
    challenge = _b64(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        "client_id": config.client_id,
        "redirect_uri": redirect_uri,
        "scope": " ".join(config.scopes),
        "state": state,
        "nonce": nonce,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    plain = {
        "s": state,
        "n": nonce,
        "v": verifier,
        "r": redirect_uri,
        "x": time.time() + PENDING_S,
        "next": next_path,
    }
    pending = sealer.seal(orjson.dumps(plain), context=_CONTEXT)
    separator = "&" if "?" in endpoint else "?"
    return BeginOut(authorize_url=f"{endpoint}{separator}{urlencode(query)}", pending=pending)


def _refused(message: str) -> AdminError:
    return AdminError(403, f"single sign-on refused: {message}", "sso_refused")


def _opened(sealer: Sealer, body: FinishIn) -> dict[str, Any]:
    try:
        plain = orjson.loads(sealer.open(body.pending, context=_CONTEXT))
    except (CredentialError, orjson.JSONDecodeError, ValueError):
        raise _refused("this sign-in was not started here: start again") from None
    if not isinstance(plain, dict) or float(plain.get("x", 0)) < time.time():
        raise _refused("the sign-in took too long: start again")
    if not secrets.compare_digest(str(plain.get("s", "")), body.state):
        raise _refused("the provider's answer is not for this sign-in (state)")
    return plain


async def _claims(
    config: SsoConfig, client: ProviderClient, body: FinishIn, plain: dict[str, Any]
) -> dict[str, Any]:
    try:
        tokens = await client.exchange(body.code, str(plain["v"]), str(plain["r"]))
        id_token = str(tokens.get("id_token") or "")
        if not id_token:
            raise TokenRefused("the provider answered no ID token")
        keys = await client.keys()
        kid = header_of(id_token).get("kid")
        if kid is not None and all(k.get("kid") != kid for k in keys):
            keys = await client.keys(fresh=True)  # the provider rotated its keys
        return verify(
            id_token, keys, issuer=config.issuer, audience=config.client_id, nonce=str(plain["n"])
        )
    except ProviderFailed as failed:
        raise AdminError(502, f"the identity provider failed: {failed}", "sso_failed") from None
    except TokenRefused as refused:
        raise _refused(str(refused)) from None


@dataclass(frozen=True, slots=True)
class Person:
    email: str
    name: str | None
    groups: tuple[str, ...]


def person_of(config: SsoConfig, claims: dict[str, Any]) -> Person:
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        raise _refused("the provider gave no email address (ask for the email scope)")
    if claims.get("email_verified") is False:
        raise _refused("the provider has not verified this email address")
    email = normalize_email(email)
    domain = email.rpartition("@")[2]
    if config.allowed_domains and domain not in config.allowed_domains:
        raise _refused(f"addresses of {domain} may not sign in here")
    groups = claims.get(config.groups_claim) or []
    if isinstance(groups, str):
        groups = [groups]
    name = claims.get("name")
    return Person(
        email,
        name if isinstance(name, str) and name else None,
        tuple(str(g) for g in groups if isinstance(g, str | int)),
    )


async def _grants(
    session: AsyncSession, config: SsoConfig, person: Person
) -> tuple[dict[str, Role], bool]:
    """The role per tenant id the person's groups grant, and whether they make it a platform
    admin; the default role in the default tenant when no group grants anything."""
    roles: dict[str, Role] = {}
    platform = False
    for group in person.groups:
        for slug, role in config.role_map.get(group, []):
            if role is Role.PLATFORM_ADMIN:
                platform = True
                continue
            if slug is None:
                tenant: Tenant | None = await ensure_default_tenant(session)
            else:
                tenant = await session.scalar(select(Tenant).where(Tenant.slug == slug))
            if tenant is None:
                continue  # a mapping to a tenant that does not exist (yet): nothing there
            held = roles.get(tenant.id)
            if held is None or RANK.index(role) < RANK.index(held):
                roles[tenant.id] = role
    if not roles and not platform and config.default_role is not None:
        roles[(await ensure_default_tenant(session)).id] = config.default_role
    return roles, platform


async def sign_in(
    session: AsyncSession, config: SsoConfig, passwords: Passwords, person: Person
) -> tuple[User, bool]:
    """The person's account (made now when it has none) with the memberships its groups
    grant; True when it was made now."""
    roles, platform = await _grants(session, config, person)
    user = await users.by_email(session, person.email)
    made = user is None
    if user is None:
        if not roles and not platform:
            raise _refused(
                "none of your groups grants a role here (ask an administrator to map one)"
            )
        user = User(
            email=person.email,
            name=person.name,
            password_hash=passwords.hash(secrets.token_urlsafe(32)),  # signs in by SSO only
            platform_admin=platform,
            email_verified_at=utcnow(),
        )
        session.add(user)
        await session.flush()
    elif user.disabled:
        raise AdminError(403, "this account is disabled", "account_disabled")
    else:
        if user.pending:  # the provider vouched for the address
            user.pending = False
        if user.email_verified_at is None:
            user.email_verified_at = utcnow()
        if platform and not user.platform_admin:
            user.platform_admin = True
    for tenant_id, role in roles.items():
        membership = await users.membership(session, tenant_id, user.id)
        if membership is None:
            session.add(Membership(user_id=user.id, tenant_id=tenant_id, role=role.value))
        elif membership.role != role.value:
            membership.role = role.value
    await session.flush()
    if not made and not roles and not platform and not user.platform_admin:
        has_any = await session.scalar(
            select(Membership.user_id).where(Membership.user_id == user.id)
        )
        if has_any is None:
            raise _refused(
                "none of your groups grants a role here (ask an administrator to map one)"
            )
    return user, made


async def finish(
    session: AsyncSession,
    config: SsoConfig,
    client: ProviderClient,
    sealer: Sealer,
    passwords: Passwords,
    body: FinishIn,
) -> tuple[User, bool, str]:
    plain = _opened(sealer, body)
    claims = await _claims(config, client, body, plain)
    user, made = await sign_in(session, config, passwords, person_of(config, claims))
    return user, made, str(plain.get("next") or "/dashboard")
