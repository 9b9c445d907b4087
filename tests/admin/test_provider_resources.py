"""Provider resources (a provider's accounts) over the real admin app: credentials
write-only and sealed at rest under the resource's id, the YAML's rules with the field
named, one name per provider, ETags, the provider's permissions, the audit log, and the
snapshot the data plane builds (variants per resource; a disabled resource left out; a
provider whose resources are all disabled has its routes built disabled)."""

from __future__ import annotations

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.admin.support import assert_error, audit_actions, match, snapshot

SECRET_A = "sk-account-a-secret-1111"
SECRET_B = "sk-account-b-secret-2222"


async def _provider_with_model(admin: httpx.AsyncClient, slug: str) -> str:
    made = await admin.post(
        "/providers", json={"slug": slug, "type": "mock", "api_key": "sk-own-credential-0000"}
    )
    assert made.status_code == 201, made.text
    model = await admin.post(
        "/models",
        json={"name": f"{slug}-model", "routes": [{"provider": slug, "upstream_model": "m"}]},
    )
    assert model.status_code == 201, model.text
    return str(made.json()["id"])


async def test_resources_crud_with_write_only_credentials(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    provider_id = await _provider_with_model(admin, "pooled")
    base = f"/providers/{provider_id}/resources"
    first = await admin.post(
        base,
        json={
            "name": "account-a",
            "api_key": SECRET_A,
            "headers": {"OpenAI-Organization": "org-secret-a"},
            "priority": 0,
            "rpm": 100,
        },
    )
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["api_key_set"] is True and body["api_key_last_four"] == "1111"
    assert body["header_names"] == ["OpenAI-Organization"]
    assert body["health"] == "closed" and body["rpm"] == 100 and body["tpm"] is None
    second = await admin.post(base, json={"name": "account-b", "api_key": SECRET_B, "priority": 1})
    assert second.status_code == 201, second.text

    listed = await admin.get(base)
    assert [r["name"] for r in listed.json()["data"]] == ["account-a", "account-b"]
    for response in (first, second, listed, await admin.get(f"{base}/{body['id']}")):
        assert SECRET_A not in response.text and SECRET_B not in response.text
        assert "org-secret-a" not in response.text
    async with engine.connect() as conn:
        stored = repr((await conn.execute(text("SELECT * FROM provider_resources"))).all())
    assert SECRET_A not in stored and SECRET_B not in stored

    # the data plane's view: one variant per account, each calling with its own key
    served = await snapshot(engine)
    model = served.models[next(iter(served.models))]["pooled-model"]
    assert model.resourced
    (route,) = model.routes
    assert [v.provider.api_key for v in route.variants] == [SECRET_A, SECRET_B]
    assert [v.breaker_key for v in route.variants] == [
        f"resource:{body['id']}",
        f"resource:{second.json()['id']}",
    ]
    assert route.variants[0].provider.headers["OpenAI-Organization"] == "org-secret-a"

    # a change without the key keeps it; disabling takes the account out of routing
    fetched = await admin.get(f"{base}/{body['id']}")
    disabled = await admin.patch(
        f"{base}/{body['id']}", json={"disabled": True}, headers=match(fetched)
    )
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["health"] == "disabled" and disabled.json()["api_key_set"] is True
    assert_error(
        await admin.patch(f"{base}/{body['id']}", json={"priority": 3}, headers=match(fetched)),
        409,
    )
    served = await snapshot(engine)
    (route,) = served.models[next(iter(served.models))]["pooled-model"].routes
    assert [v.provider.api_key for v in route.variants] == [SECRET_B]
    assert not route.disabled

    # every account disabled: the provider's own credential does not stand in
    fetched_b = await admin.get(f"{base}/{second.json()['id']}")
    off = await admin.patch(
        f"{base}/{second.json()['id']}", json={"disabled": True}, headers=match(fetched_b)
    )
    assert off.status_code == 200, off.text
    served = await snapshot(engine)
    (route,) = served.models[next(iter(served.models))]["pooled-model"].routes
    assert route.disabled and route.variants == ()

    # deletion; the provider without resources is itself again
    for resource in (disabled, off):
        gone = await admin.delete(f"{base}/{resource.json()['id']}", headers=match(resource))
        assert gone.status_code == 204, gone.text
    assert (await admin.get(base)).json()["data"] == []
    served = await snapshot(engine)
    (route,) = served.models[next(iter(served.models))]["pooled-model"].routes
    assert not route.disabled and route.variants == ()
    assert route.provider.api_key == "sk-own-credential-0000"

    actions = [action for action, _, _ in await audit_actions(engine)]
    assert actions.count("provider_resource.create") == 2
    assert actions.count("provider_resource.update") == 2
    assert actions.count("provider_resource.delete") == 2
    async with engine.connect() as conn:
        audited = repr((await conn.execute(text("SELECT * FROM audit_log"))).all())
    assert SECRET_A not in audited and SECRET_B not in audited


async def test_resource_rules_name_the_field(admin: httpx.AsyncClient) -> None:
    provider_id = await _provider_with_model(admin, "ruled")
    base = f"/providers/{provider_id}/resources"
    assert_error(await admin.post(base, json={"name": "Bad Name"}), 400, "name")
    assert_error(await admin.post(base, json={"name": "a", "weight": -1}), 400, "weight")
    assert_error(await admin.post(base, json={"name": "a", "rpm": 0}), 400, "rpm")
    assert_error(await admin.post(base, json={"name": "a", "headers": {"Host": "x"}}), 400)
    assert_error(await admin.post(base, json={"name": "a", "api_key": "x\ny"}), 400, "api_key")
    assert (await admin.post(base, json={"name": "a"})).status_code == 201
    assert_error(await admin.post(base, json={"name": "a"}), 409, "name")
    assert_error(await admin.get(f"{base}/nope"), 404)
    assert_error(await admin.get("/providers/nope/resources"), 404)


async def test_a_resource_belongs_to_its_provider(admin: httpx.AsyncClient) -> None:
    one = await _provider_with_model(admin, "one")
    two = await _provider_with_model(admin, "two")
    made = await admin.post(f"/providers/{one}/resources", json={"name": "acct"})
    assert made.status_code == 201, made.text
    assert_error(await admin.get(f"/providers/{two}/resources/{made.json()['id']}"), 404)


async def test_provider_create_and_patch_take_the_whole_set(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    made = await admin.post(
        "/providers",
        json={
            "slug": "declared",
            "type": "mock",
            "resources": [{"name": "a", "api_key": SECRET_A}, {"name": "b", "api_key": SECRET_B}],
        },
    )
    assert made.status_code == 201, made.text
    assert SECRET_A not in made.text
    base = f"/providers/{made.json()['id']}/resources"
    assert [r["name"] for r in (await admin.get(base)).json()["data"]] == ["a", "b"]
    fetched = await admin.get(f"/providers/{made.json()['id']}")
    patched = await admin.patch(
        f"/providers/{made.json()['id']}",
        json={"resources": [{"name": "b", "api_key": SECRET_B, "priority": 5}]},
        headers=match(fetched),
    )
    assert patched.status_code == 200, patched.text
    listed = (await admin.get(base)).json()["data"]
    assert [(r["name"], r["priority"], r["api_key_last_four"]) for r in listed] == [
        ("b", 5, "2222")
    ]


async def test_an_openai_codex_resource_takes_no_api_key(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """Its accounts sign in by OAuth (docs/codex.md): a key is refused on create and on
    update, as the YAML loader refuses it, with the field named, and nothing is written."""
    made = await admin.post("/providers", json={"slug": "codexed", "type": "openai_codex"})
    assert made.status_code == 201, made.text
    base = f"/providers/{made.json()['id']}/resources"

    refused = await admin.post(base, json={"name": "alice", "api_key": SECRET_A})
    assert_error(refused, 400, "api_key")
    assert "openai_codex resources take no api_key" in refused.json()["error"]["message"]
    assert (await admin.get(base)).json()["data"] == []

    kept = await admin.post(base, json={"name": "alice", "priority": 1})
    assert kept.status_code == 201, kept.text
    fetched = await admin.get(f"{base}/{kept.json()['id']}")
    refused = await admin.patch(
        f"{base}/{kept.json()['id']}",
        json={"api_key": SECRET_B, "priority": 2},
        headers=match(fetched),
    )
    assert_error(refused, 400, "api_key")
    assert "openai_codex resources take no api_key" in refused.json()["error"]["message"]
    after = await admin.get(f"{base}/{kept.json()['id']}")
    assert after.headers["etag"] == fetched.headers["etag"]
    assert after.json()["api_key_set"] is False and after.json()["priority"] == 1
    async with engine.connect() as conn:
        stored = repr((await conn.execute(text("SELECT * FROM provider_resources"))).all())
    assert SECRET_A not in stored and SECRET_B not in stored
    audited = [(a, code) for a, _, code in await audit_actions(engine) if "resource" in a]
    assert audited == [
        ("POST /providers/{provider_id}/resources", 400),  # the refusals, as refusals
        ("provider_resource.create", 201),
        ("PATCH /providers/{provider_id}/resources/{resource_id}", 400),
    ]

    # removing a key (none is stored) and the other fields stay allowed
    changed = await admin.patch(
        f"{base}/{kept.json()['id']}", json={"api_key": None, "priority": 3}, headers=match(after)
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["priority"] == 3
