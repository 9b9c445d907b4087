"""Virtual models, routes and prices over the real admin app: the YAML's rules with the field
named, routes as a sub-resource (a route change moves the model's ETag too), price versions,
and the snapshot the data plane builds from the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.admin.support import assert_error, generation, match, snapshot


@pytest.fixture
async def providers(admin: httpx.AsyncClient) -> None:
    for slug in ("up", "backup"):
        response = await admin.post("/providers", json={"slug": slug, "type": "mock"})
        assert response.status_code == 201, response.text


def _model(**extra: Any) -> dict[str, Any]:
    return {"name": "chat", "routes": [{"provider": "up", "upstream_model": "m1"}], **extra}


@pytest.mark.usefixtures("providers")
async def test_model_with_routes_reaches_the_snapshot(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    created = await admin.post(
        "/models", json=_model(pricing={"input_per_mtok": 1.5, "output_per_mtok": 2})
    )
    assert created.status_code == 201, created.text
    model = created.json()
    assert [r["provider"] for r in model["routes"]] == ["up"]
    assert model["price"]["input_per_mtok"] == 1.5 and model["price"]["in_force"] is True
    served = (await snapshot(engine)).models[model["tenant_id"]]["chat"]
    assert [r.upstream_model for r in served.routes] == ["m1"]
    assert served.price is not None and served.price.input == 1_500_000

    added = await admin.post(
        f"/models/{model['id']}/routes",
        json={"provider": "backup", "upstream_model": "m2", "priority": 1, "tag": "b"},
    )
    assert added.status_code == 201, added.text
    served = (await snapshot(engine)).models[model["tenant_id"]]["chat"]
    assert [(r.provider.slug, r.upstream_model) for r in served.routes] == [
        ("up", "m1"),
        ("backup", "m2"),
    ]
    # the model's ETag moved with its routes: a PATCH from the old read is refused
    assert_error(
        await admin.patch(f"/models/{model['id']}", json={"deadline_s": 9}, headers=match(created)),
        409,
    )
    route_url = f"/models/{model['id']}/routes/{added.json()['id']}"
    disabled = await admin.patch(route_url, json={"disabled": True}, headers=match(added))
    assert disabled.status_code == 200, disabled.text
    served = (await snapshot(engine)).models[model["tenant_id"]]["chat"]
    assert [r.disabled for r in served.routes] == [False, True]
    assert (await admin.delete(route_url, headers=match(disabled))).status_code == 204
    only = (await admin.get(f"/models/{model['id']}")).json()["routes"]
    assert len(only) == 1
    # the last route can go too: the model stays, as a draft (docs: "Model directory")
    last = f"/models/{model['id']}/routes/{only[0]['id']}"
    etag = {"If-Match": f'"{only[0]["version"]}"'}
    assert (await admin.delete(last, headers=etag)).status_code == 204


@pytest.mark.usefixtures("providers")
async def test_model_rules_name_the_field(admin: httpx.AsyncClient) -> None:
    assert_error(await admin.post("/models", json=_model(name="a:b")), 400, "name")
    assert_error(await admin.post("/models", json=_model(routes=[])), 400, "routes")
    assert_error(
        await admin.post(
            "/models", json=_model(routes=[{"provider": "nope", "upstream_model": "m"}])
        ),
        400,
        "routes[0].provider",
    )
    assert_error(await admin.post("/models", json=_model(fallbacks=["ghost"])), 400, "fallbacks[0]")
    assert_error(await admin.post("/models", json=_model(strategy="random")), 400, "strategy")
    assert_error(
        await admin.post("/models", json=_model(retry={"attempts": 50})), 400, "retry.attempts"
    )
    created = await admin.post("/models", json=_model())
    assert_error(await admin.post("/models", json=_model()), 409, "name")
    url = f"/models/{created.json()['id']}"
    assert_error(await admin.patch(url, json={"name": "x"}, headers=match(created)), 400, "name")
    assert_error(
        await admin.post(f"{url}/routes", json={"provider": "up", "upstream_model": "m1"}),
        409,
        "upstream_model",
    )
    assert_error(
        await admin.post(
            f"{url}/routes", json={"provider": "up", "upstream_model": "m", "weight": -1}
        ),
        400,
        "weight",
    )


@pytest.mark.usefixtures("providers")
async def test_patch_routes_replaces_the_list(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    created = await admin.post("/models", json=_model())
    before = await generation(engine)
    changed = await admin.patch(
        f"/models/{created.json()['id']}",
        json={"routes": [{"provider": "backup", "upstream_model": "m9"}], "strategy": "fixed"},
        headers=match(created),
    )
    assert changed.status_code == 200, changed.text
    assert [r["upstream_model"] for r in changed.json()["routes"]] == ["m9"]
    assert await generation(engine) == before + 1
    served = (await snapshot(engine)).models[created.json()["tenant_id"]]["chat"]
    assert (served.strategy, [r.upstream_model for r in served.routes]) == ("fixed", ["m9"])


@pytest.mark.usefixtures("providers")
async def test_delete_is_refused_while_named(admin: httpx.AsyncClient) -> None:
    target = await admin.post("/models", json=_model(name="backup-model"))
    await admin.post("/models", json=_model(fallbacks=["backup-model"]))
    assert_error(await admin.delete(f"/models/{target.json()['id']}", headers=match(target)), 409)


@pytest.mark.usefixtures("providers")
async def test_price_versions(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    model = (await admin.post("/models", json=_model())).json()
    url = f"/models/{model['id']}/prices"
    assert (await admin.get(url)).json()["data"] == []
    now = await admin.post(url, json={"input_per_mtok": 3, "output_per_mtok": 4})
    assert now.status_code == 201, now.text
    later = datetime.now(UTC) + timedelta(days=30)
    scheduled = await admin.post(
        url, json={"input_per_mtok": 5, "effective_from": later.isoformat()}
    )
    assert scheduled.status_code == 201, scheduled.text
    listed = (await admin.get(url)).json()["data"]
    assert [(p["input_per_mtok"], p["in_force"]) for p in listed] == [(5.0, False), (3.0, True)]
    served = (await snapshot(engine)).models[model["tenant_id"]]["chat"]
    assert served.price is not None and served.price.input == 3_000_000
    assert_error(await admin.post(url, json={"input_per_mtok": -1}), 400, "input_per_mtok")
    assert_error(await admin.post(url, json={}), 400)
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    assert_error(
        await admin.post(url, json={"input_per_mtok": 1, "effective_from": past}),
        400,
        "effective_from",
    )
    assert_error(await admin.delete(f"{url}/{now.json()['id']}"), 409)
    assert (await admin.delete(f"{url}/{scheduled.json()['id']}")).status_code == 204
    assert len((await admin.get(url)).json()["data"]) == 1


@pytest.mark.usefixtures("providers")
async def test_sticky_routing_is_on_by_default_and_set_per_model(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    two_routes = [
        {"provider": "up", "upstream_model": "m1"},
        {"provider": "backup", "upstream_model": "m2"},
    ]
    created = await admin.post("/models", json=_model(routes=two_routes))
    assert created.status_code == 201, created.text
    model = created.json()
    assert model["affinity"] == {"enabled": True, "ttl_s": 3600.0}
    served = (await snapshot(engine)).models[model["tenant_id"]]["chat"]
    assert served.sticky and served.affinity_ttl_s == 3600.0

    url = f"/models/{model['id']}"
    changed = await admin.patch(
        url, json={"affinity": {"enabled": True, "ttl_s": 600}}, headers=match(created)
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["affinity"] == {"enabled": True, "ttl_s": 600.0}
    assert (await snapshot(engine)).models[model["tenant_id"]]["chat"].affinity_ttl_s == 600.0
    off = await admin.patch(url, json={"affinity": {"enabled": False}}, headers=match(changed))
    assert off.status_code == 200, off.text
    served = (await snapshot(engine)).models[model["tenant_id"]]["chat"]
    assert not served.sticky and served.affinity_ttl_s is None
    assert_error(
        await admin.patch(url, json={"affinity": {"ttl_s": 0}}, headers=match(off)),
        400,
        "affinity.ttl_s",
    )
    single = await admin.post("/models", json=_model(name="single"))
    assert single.json()["affinity"]["enabled"] is True
    assert not (await snapshot(engine)).models[model["tenant_id"]]["single"].sticky  # one route


@pytest.mark.usefixtures("providers")
async def test_stream_rescue_is_off_by_default_and_set_per_model(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    created = await admin.post("/models", json=_model())
    assert created.status_code == 201, created.text
    model = created.json()
    assert model["stream_rescue"] is False
    assert not (await snapshot(engine)).models[model["tenant_id"]]["chat"].stream_rescue
    url = f"/models/{model['id']}"
    on = await admin.patch(url, json={"stream_rescue": True}, headers=match(created))
    assert on.status_code == 200, on.text
    assert on.json()["stream_rescue"] is True
    assert (await snapshot(engine)).models[model["tenant_id"]]["chat"].stream_rescue
    assert_error(
        await admin.patch(url, json={"stream_rescue": "sometimes"}, headers=match(on)),
        400,
        "stream_rescue",
    )
