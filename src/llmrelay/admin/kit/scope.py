"""Which rows an actor may see in a list: its tenants for the permission, and inside a tenant
where it is limited to some projects, only those projects' rows. As a WHERE clause, so a
page never holds a row the actor may not read (and a cursor cannot reach one either)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, false, or_
from sqlalchemy.orm import InstrumentedAttribute

from llmrelay.admin.access import Actor


def visible(
    actor: Actor,
    permission: str,
    tenant_column: InstrumentedAttribute[str],
    project_column: InstrumentedAttribute[str] | None = None,
) -> ColumnElement[bool] | None:
    """None: every row (the platform admin)."""
    tenants = actor.tenants_for(permission)
    if tenants is None:
        return None
    if not tenants:
        return false()
    if project_column is None:
        return tenant_column.in_(tenants)
    whole = [t for t in tenants if actor.project_scope(t) is None]
    clauses: list[ColumnElement[bool]] = []
    if whole:
        clauses.append(tenant_column.in_(whole))
    for tenant in tenants:
        projects = actor.project_scope(tenant)
        if projects is not None and projects:
            clauses.append(tenant_column.__eq__(tenant) & project_column.in_(projects))
    return or_(*clauses) if clauses else false()
