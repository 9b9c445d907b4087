"""The role table and the Actor's checks, as data: no database needed."""

from __future__ import annotations

import pytest

from llmrelay.admin.access import (
    PERMISSIONS,
    RESOURCES,
    ROLE_PERMISSIONS,
    TOKEN_ACTOR,
    Actor,
    Role,
    require,
)
from llmrelay.admin.errors import AdminError


def _actor(
    roles: dict[str, Role],
    projects: dict[str, frozenset[str] | None] | None = None,
    locked: frozenset[str] = frozenset(),
) -> Actor:
    return Actor(
        kind="user",
        user_id="u",
        email="u@example.com",
        platform_admin=False,
        roles=roles,
        projects=projects or {},
        locked=locked,
    )


def test_the_role_table_says_what_the_issue_says() -> None:
    reads = {f"{r}:read" for r in RESOURCES}
    assert ROLE_PERMISSIONS[Role.PLATFORM_ADMIN] == PERMISSIONS
    assert ROLE_PERMISSIONS[Role.TENANT_ADMIN] == PERMISSIONS
    assert ROLE_PERMISSIONS[Role.DEVELOPER] == {
        "keys:read",
        "keys:write",
        "models:read",
        "models:write",
        "playground:read",
        "playground:write",
        "projects:read",
        "providers:read",
        "usage:read",
    }
    assert ROLE_PERMISSIONS[Role.BILLING] == {
        "usage:read",
        "limits:read",
        "limits:write",
        "prices:read",
        "prices:write",
        "projects:read",
        "billing:read",
        "billing:write",
    }
    assert ROLE_PERMISSIONS[Role.VIEWER] == reads - {"audit:read"}
    assert ROLE_PERMISSIONS[Role.AUDITOR] == {"audit:read", "usage:read"}
    assert set(ROLE_PERMISSIONS) == set(Role)


def test_ensure_hides_other_tenants_and_refuses_missing_permissions() -> None:
    actor = _actor({"a": Role.VIEWER})
    actor.ensure("keys:read", "a")
    with pytest.raises(AdminError) as other:
        actor.ensure("keys:read", "b")
    assert (other.value.status, other.value.kind) == (404, "not_found")
    with pytest.raises(AdminError) as refused:
        actor.ensure("keys:write", "a")
    assert (refused.value.status, refused.value.kind) == (403, "permission_error")
    with pytest.raises(ValueError, match="unknown permission"):
        actor.can("key:read", "a")


def test_tenants_for_and_project_scope() -> None:
    actor = _actor(
        {"a": Role.DEVELOPER, "b": Role.VIEWER, "c": Role.TENANT_ADMIN},
        projects={"a": frozenset({"p1"}), "b": None, "c": None},
    )
    assert actor.tenants_for("keys:write") == frozenset({"a", "c"})
    assert actor.tenants_for("audit:read") == frozenset({"c"})
    assert actor.project_scope("a") == frozenset({"p1"}) and actor.project_scope("c") is None
    actor.ensure_project("keys:write", "a", "p1")
    with pytest.raises(AdminError) as hidden:
        actor.ensure_project("keys:write", "a", "p2")
    assert hidden.value.status == 404
    assert TOKEN_ACTOR.tenants_for("keys:write") is None
    assert TOKEN_ACTOR.can("tenants:write", "anything")


def test_locked_tenants_say_two_factor_is_required() -> None:
    actor = _actor({"a": Role.TENANT_ADMIN, "b": Role.VIEWER}, locked=frozenset({"a"}))
    assert not actor.can("keys:read", "a") and actor.can("keys:read", "b")
    with pytest.raises(AdminError) as locked:
        actor.ensure("keys:read", "a")
    assert locked.value.kind == "two_factor_required"
    assert actor.tenants_for("keys:read") == frozenset({"b"})


def test_role_names_for_the_audit_log() -> None:
    actor = _actor({"a": Role.BILLING, "b": Role.VIEWER})
    assert actor.role_name("a") == "billing"
    assert actor.role_name("z") == "none"
    assert actor.role_name(None) == "billing,viewer"
    assert TOKEN_ACTOR.role_name("a") == "platform_admin"


def test_require_refuses_unknown_permissions_at_import_time() -> None:
    with pytest.raises(ValueError):
        require("tenant:read")
