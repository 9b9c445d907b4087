"""The SQL of users and memberships."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.admin.kit import pages
from llmrelay.store.models import Project
from llmrelay.store.models_access import Membership, User


async def get(session: AsyncSession, user_id: str) -> User | None:
    return await session.get(User, user_id)


async def by_email(session: AsyncSession, email: str) -> User | None:
    return await session.scalar(select(User).where(User.email == email))


def in_tenants(tenants: Iterable[str]) -> ColumnElement[bool]:
    """Users with a membership in one of `tenants`."""
    members = select(Membership.user_id).where(Membership.tenant_id.in_(list(tenants)))
    return User.id.in_(members)


async def list_page(
    session: AsyncSession,
    where: ColumnElement[bool] | None,
    email: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[User], str | None]:
    query = select(User)
    if where is not None:
        query = query.where(where)
    if email is not None:
        query = query.where(User.email == email)
    return await pages.page(session, query, User.id, limit, cursor)


async def memberships_of(session: AsyncSession, user_id: str) -> Sequence[Membership]:
    rows = await session.scalars(
        select(Membership).where(Membership.user_id == user_id).order_by(Membership.tenant_id)
    )
    return rows.all()


async def membership(session: AsyncSession, tenant_id: str, user_id: str) -> Membership | None:
    return await session.scalar(
        select(Membership).where(Membership.tenant_id == tenant_id, Membership.user_id == user_id)
    )


async def members_page(
    session: AsyncSession, tenant_id: str, limit: int, cursor: str | None
) -> tuple[Sequence[tuple[Membership, str]], str | None]:
    """A tenant's memberships with each user's email, in membership id order."""
    query = select(Membership)
    query = query.where(Membership.tenant_id == tenant_id)
    rows, next_cursor = await pages.page(session, query, Membership.id, limit, cursor)
    emails = dict(
        (
            await session.execute(
                select(User.id, User.email).where(User.id.in_([m.user_id for m in rows]))
            )
        ).all()
    )
    return [(m, emails.get(m.user_id, "")) for m in rows], next_cursor


async def project_ids_of(session: AsyncSession, tenant_id: str) -> frozenset[str]:
    rows = await session.scalars(select(Project.id).where(Project.tenant_id == tenant_id))
    return frozenset(rows)
