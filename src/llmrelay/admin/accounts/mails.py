"""The account mails (invitation, membership notice, verification, password reset): words
from mail/templates, a link from the console's base URL, queued in the caller's transaction
(mail/outbox.py). Which base URL a link starts with is decided here, once: see `base_url`."""

from __future__ import annotations

from datetime import datetime

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.errors import AdminError
from llmrelay.admin.state import AccountPolicy
from llmrelay.mail import links, outbox
from llmrelay.mail.templates import render
from llmrelay.store.crypto import Sealer


def base_url(policy: AccountPolicy, request: Request) -> str:
    """LLMRELAY_PUBLIC_URL. Without it, development links to the address the request came to;
    production refuses (503): a link built from a request's Host header would let anyone who
    asks for a reset of someone else's account choose where its token is sent."""
    if policy.public_url is not None:
        return policy.public_url
    if policy.production:
        raise AdminError(
            503,
            "LLMRELAY_PUBLIC_URL is not set: mails with links cannot be sent",
            "unavailable",
        )
    return str(request.base_url).rstrip("/")  # the app's root, not the /api/admin mount


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


async def invitation(
    session: AsyncSession,
    sealer: Sealer,
    *,
    base: str,
    to: str,
    token: str,
    expires_at: datetime,
    inviter: str,
    tenant: str,
    role: str,
    tenant_id: str | None,
) -> None:
    mail = render(
        "invitation",
        inviter=inviter,
        tenant=tenant,
        role=role,
        link=links.link(base, links.ACCEPT_INVITATION, token=token),
        expires=_when(expires_at),
    )
    await outbox.queue_mail(
        session,
        outbox.INVITATION,
        to,
        mail.subject,
        mail.text,
        mail.html,
        sealer=sealer,
        tenant_id=tenant_id,
    )


async def membership(
    session: AsyncSession,
    sealer: Sealer,
    *,
    base: str,
    to: str,
    inviter: str,
    tenant: str,
    role: str,
    tenant_id: str | None,
) -> None:
    mail = render(
        "membership",
        inviter=inviter,
        tenant=tenant,
        role=role,
        link=links.link(base, links.SIGN_IN),
    )
    await outbox.queue_mail(
        session,
        outbox.MEMBERSHIP,
        to,
        mail.subject,
        mail.text,
        mail.html,
        sealer=sealer,
        tenant_id=tenant_id,
    )


async def verification(
    session: AsyncSession,
    sealer: Sealer,
    *,
    base: str,
    to: str,
    token: str,
    expires_at: datetime,
    purpose: str = "",
    tenant_id: str | None = None,
) -> None:
    mail = render(
        "verification",
        email=to,
        purpose=purpose,
        link=links.link(base, links.VERIFY_EMAIL, token=token),
        expires=_when(expires_at),
    )
    await outbox.queue_mail(
        session,
        outbox.VERIFICATION,
        to,
        mail.subject,
        mail.text,
        mail.html,
        sealer=sealer,
        tenant_id=tenant_id,
    )


async def password_reset(
    session: AsyncSession,
    sealer: Sealer,
    *,
    base: str,
    to: str,
    token: str,
    expires_at: datetime,
) -> None:
    mail = render(
        "password_reset",
        email=to,
        link=links.link(base, links.RESET_PASSWORD, token=token),
        expires=_when(expires_at),
    )
    await outbox.queue_mail(
        session, outbox.PASSWORD_RESET, to, mail.subject, mail.text, mail.html, sealer=sealer
    )
