"""Guardrail policies over the real admin app (SQLite and PostgreSQL): CRUD with the rules
checked and the field named, bindings through projects and keys (needing guardrails:write),
the global binding, deletion refused while bound, the snapshot's guards, the dry run, the
hits list, and a rotated-out secret keeping its key's guardrails."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay import apikeys
from llmrelay.admin.state import AdminState
from llmrelay.store.db import session_factory
from llmrelay.store.models_guardrails import GuardrailHit
from llmrelay.store.types import utcnow
from tests.admin.access_support import add_user, console, fast_passwords
from tests.admin.support import assert_error, match, snapshot

__all__ = ["fast_passwords"]

PII = {"name": "pii", "rules": [{"detector": "pii", "action": "mask"}]}


async def _rules(engine: AsyncEngine, secret: str) -> list[tuple[str, str, str]] | None:
    guard = (await snapshot(engine)).keys_by_digest[apikeys.digest(secret)].guard
    return None if guard is None else sorted((r.policy, r.name, r.action) for r in guard.rules)


async def test_lifecycle_bindings_and_the_global_binding(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    created = await admin.post("/guardrails", json=PII)
    assert created.status_code == 201, created.text
    policy = created.json()
    assert policy["rules"] == [{"detector": "pii", "action": "mask"}]
    lenient = (
        await admin.post(
            "/guardrails", json={"name": "lenient", "rules": [{"detector": "pii", "action": "off"}]}
        )
    ).json()
    project = (await admin.post("/projects", json={"name": "acme", "guardrails": ["pii"]})).json()
    assert project["guardrails"] == ["pii"]
    key = (await admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"})).json()
    assert await _rules(engine, key["key"]) == [("pii", "pii", "mask")]

    read = await admin.get(f"/keys/{key['id']}")
    changed = await admin.patch(
        f"/keys/{key['id']}", json={"guardrails": ["lenient"]}, headers=match(read)
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["guardrails"] == ["lenient"]
    assert changed.json()["version"] == read.json()["version"] + 1  # the ETag moves
    assert await _rules(engine, key["key"]) is None  # switched off for this key

    renamed = await admin.patch(
        f"/guardrails/{policy['id']}", json={"name": "personal"}, headers=match(created)
    )
    assert renamed.status_code == 200, renamed.text
    assert (await admin.get(f"/projects/{project['id']}")).json()["guardrails"] == ["personal"]
    listed = (await admin.get("/keys")).json()["data"]
    assert [k["guardrails"] for k in listed] == [["lenient"]]

    # the global binding: default-tenant policies, If-Match, only the platform admin
    setting = await admin.get("/settings/guardrails")
    assert setting.json() == {"global": []}
    assert_error(await admin.put("/settings/guardrails", json={"global": ["personal"]}), 428)
    assert_error(
        await admin.put("/settings/guardrails", json={"global": ["ghost"]}, headers=match(setting)),
        400,
        "global",
    )
    put = await admin.put(
        "/settings/guardrails", json={"global": ["personal"]}, headers=match(setting)
    )
    assert put.json() == {"global": ["personal"]}
    assert_error(
        await admin.put("/settings/guardrails", json={"global": []}, headers=match(setting)), 409
    )

    # bound (project and global): no delete; unbound: gone
    url = f"/guardrails/{policy['id']}"
    refused = await admin.delete(url, headers=match(renamed))
    assert_error(refused, 409)
    assert "project acme" in refused.json()["error"]["message"]
    project_read = await admin.get(f"/projects/{project['id']}")
    await admin.patch(
        f"/projects/{project['id']}", json={"guardrails": []}, headers=match(project_read)
    )
    await admin.put("/settings/guardrails", json={"global": []}, headers={"If-Match": "*"})
    assert (await admin.delete(url, headers=match(renamed))).status_code == 204
    assert (await admin.get(f"/guardrails/{lenient['id']}")).status_code == 200


async def test_rules_name_the_field(admin: httpx.AsyncClient) -> None:
    def body(**rule: Any) -> dict[str, Any]:
        return {"name": "p", "rules": [rule]}

    assert_error(
        await admin.post("/guardrails", json=body(detector="nope", action="mask")),
        400,
        "rules[0].detector",
    )
    bad = await admin.post(
        "/guardrails", json=body(detector="regex", name="r", pattern="(a)\\1", action="mask")
    )
    assert_error(bad, 400, "rules[0]")
    assert "pattern: not a valid pattern" in bad.json()["error"]["message"]
    empty = await admin.post(
        "/guardrails", json=body(detector="regex", name="r", pattern="x*", action="mask")
    )
    assert "matches the empty text" in empty.json()["error"]["message"]
    assert_error(await admin.post("/guardrails", json={"name": "p", "rules": []}), 400, "rules")
    assert_error(
        await admin.post("/projects", json={"name": "x", "guardrails": ["ghost"]}),
        400,
        "guardrails[0]",
    )
    assert (await admin.post("/guardrails", json=PII)).status_code == 201
    assert_error(await admin.post("/guardrails", json=PII), 409, "name")


async def test_binding_needs_guardrails_write(
    admin: httpx.AsyncClient, admin_state: AdminState, engine: AsyncEngine
) -> None:
    """A developer may change keys but not switch a guardrail off with one."""
    await admin.post("/guardrails", json=PII)
    project = (await admin.post("/projects", json={"name": "acme"})).json()
    key = (await admin.post(f"/projects/{project['id']}/keys", json={"name": "ci"})).json()
    await add_user(engine, "dev@example.com", {project["tenant_id"]: "developer"})
    async with console(admin_state, "dev@example.com") as dev:
        refused = await dev.patch(
            f"/keys/{key['id']}", json={"guardrails": ["pii"]}, headers={"If-Match": "*"}
        )
        assert_error(refused, 403)
        allowed = await dev.patch(
            f"/keys/{key['id']}", json={"limits": {"rpm": 5}}, headers={"If-Match": "*"}
        )
        assert allowed.status_code == 200, allowed.text
        assert (await dev.get("/guardrails")).status_code == 200  # may read them


async def test_dry_run_shows_spans_and_the_masked_text(admin: httpx.AsyncClient) -> None:
    body = {
        "name": "mixed",
        "rules": [
            {"detector": "email", "action": "mask"},
            {"detector": "card", "action": "block", "placeholder": "<card>"},
            {"detector": "phone", "action": "audit"},
            {"detector": "iban", "action": "mask", "scope": "response"},
        ],
    }
    policy = (await admin.post("/guardrails", json=body)).json()
    text = "mail a@b.io, card 4111111111111111, call +1 415-555-2671"
    tested = await admin.post(f"/guardrails/{policy['id']}/test", json={"text": text})
    assert tested.status_code == 200, tested.text
    assert tested.json() == {
        "spans": [
            {"rule": "email", "detector": "email", "action": "mask", "start": 5, "end": 11},
            {"rule": "card", "detector": "card", "action": "block", "start": 18, "end": 34},
            {"rule": "phone", "detector": "phone", "action": "audit", "start": 41, "end": 56},
        ],
        "masked": "mail [EMAIL], card <card>, call +1 415-555-2671",
        "blocked": True,
    }
    answer = await admin.post(
        f"/guardrails/{policy['id']}/test",
        json={"text": "DE89 3704 0044 0532 0130 00", "scope": "response"},
    )
    assert answer.json()["masked"] == "[IBAN]"


async def test_hits_are_filtered_and_paged_newest_first(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    policy = (await admin.post("/guardrails", json=PII)).json()
    now = utcnow()
    async with session_factory(engine)() as session:
        for i in range(5):
            session.add(
                GuardrailHit(
                    request_id=f"req-{i}",
                    seq=0,
                    created_at=now - timedelta(minutes=10 - i),
                    tenant_id=policy["tenant_id"],
                    project_id="p1" if i % 2 else "p2",
                    key_id="k",
                    policy_id=policy["id"],
                    policy="pii",
                    rule="pii",
                    detector="email" if i < 3 else "card",
                    action="mask" if i < 4 else "block",
                    location="request",
                    field=f"messages[{i}].content",
                    count=1,
                    matched_chars=10 + i,
                )
            )
        await session.commit()
    first = (await admin.get("/guardrails/hits", params={"limit": 2})).json()
    assert [h["request_id"] for h in first["data"]] == ["req-4", "req-3"]
    second = await admin.get(
        "/guardrails/hits", params={"limit": 2, "cursor": first["next_cursor"]}
    )
    assert [h["request_id"] for h in second.json()["data"]] == ["req-2", "req-1"]
    blocks = await admin.get("/guardrails/hits", params={"action": "block"})
    assert [h["request_id"] for h in blocks.json()["data"]] == ["req-4"]
    cards = await admin.get("/guardrails/hits", params={"detector": "email", "project_id": "p1"})
    assert [h["request_id"] for h in cards.json()["data"]] == ["req-1"]
    since = (now - timedelta(minutes=7, seconds=30)).isoformat()
    recent = await admin.get("/guardrails/hits", params={"since": since})
    assert [h["request_id"] for h in recent.json()["data"]] == ["req-4", "req-3"]
    assert_error(await admin.get("/guardrails/hits", params={"cursor": "nonsense"}), 400, "cursor")


async def test_a_rotated_out_secret_keeps_its_keys_guardrails(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await admin.post("/guardrails", json=PII)
    project = (await admin.post("/projects", json={"name": "acme"})).json()
    key = (
        await admin.post(
            f"/projects/{project['id']}/keys", json={"name": "ci", "guardrails": ["pii"]}
        )
    ).json()
    rotated = await admin.post(f"/keys/{key['id']}/rotate", json={"grace_s": 600})
    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["guardrails"] == ["pii"]
    assert await _rules(engine, key["key"]) == [("pii", "pii", "mask")]  # the old secret
    assert await _rules(engine, rotated.json()["key"]) == [("pii", "pii", "mask")]
