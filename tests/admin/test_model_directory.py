"""The model directory's roles over the real admin app: a model whose last route is removed
stays as a draft (listed, not served, left out of the fallbacks that name it, served again
once a route is added), and a route targets only a model its provider's inventory lists
(when it has one; the virtual image model's upstream model is the named exception)."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.admin.support import assert_error, match, snapshot


async def _provider(admin: httpx.AsyncClient, slug: str, type_: str = "mock") -> dict[str, str]:
    made = await admin.post("/providers", json={"slug": slug, "type": type_})
    assert made.status_code == 201, made.text
    return dict(made.json())


async def test_a_model_whose_last_route_goes_is_a_draft(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await _provider(admin, "up")
    made = await admin.post(
        "/models", json={"name": "drafted", "routes": [{"provider": "up", "upstream_model": "m"}]}
    )
    assert made.status_code == 201, made.text
    assert made.json()["status"] == "served"
    other = await admin.post(
        "/models",
        json={
            "name": "leaning",
            "fallbacks": ["drafted"],
            "routes": [{"provider": "up", "upstream_model": "n"}],
        },
    )
    assert other.status_code == 201, other.text
    tenant = made.json()["tenant_id"]
    (route,) = made.json()["routes"]
    url = f"/models/{made.json()['id']}"
    gone = await admin.delete(f"{url}/routes/{route['id']}", headers={"If-Match": '"1"'})
    assert gone.status_code == 204, gone.text

    draft = await admin.get(url)
    assert draft.status_code == 200
    assert draft.json()["status"] == "draft" and draft.json()["routes"] == []
    assert "drafted" in [m["name"] for m in (await admin.get("/models")).json()["data"]]
    served = await snapshot(engine)
    assert "drafted" not in served.models[tenant]
    assert served.models[tenant]["leaning"].fallbacks == ()

    # a change to the draft that leaves its routes out is taken; routes: [] is not a way out
    changed = await admin.patch(url, json={"deadline_s": 42}, headers=match(draft))
    assert changed.status_code == 200, changed.text
    assert changed.json()["deadline_s"] == 42 and changed.json()["status"] == "draft"

    back = await admin.post(f"{url}/routes", json={"provider": "up", "upstream_model": "m"})
    assert back.status_code == 201, back.text
    assert (await admin.get(url)).json()["status"] == "served"
    served = await snapshot(engine)
    assert served.models[tenant]["drafted"].deadline_s == 42
    assert served.models[tenant]["leaning"].fallbacks == ("drafted",)


async def test_a_route_targets_a_model_in_its_providers_inventory(
    admin: httpx.AsyncClient,
) -> None:
    listed = await _provider(admin, "listed")
    await _provider(admin, "unlisted")
    inventory = await admin.put(
        f"/providers/{listed['id']}/models",
        json={"models": ["gpt-4o-mini", {"id": "gpt-4o"}]},
        headers={"If-Match": f'"{listed["version"]}"'},
    )
    assert inventory.status_code == 200, inventory.text

    assert_error(
        await admin.post(
            "/models",
            json={"name": "x", "routes": [{"provider": "listed", "upstream_model": "gpt-9"}]},
        ),
        400,
        "routes[0].upstream_model",
    )
    made = await admin.post(
        "/models",
        json={"name": "x", "routes": [{"provider": "listed", "upstream_model": "gpt-4o-mini"}]},
    )
    assert made.status_code == 201, made.text
    url = f"/models/{made.json()['id']}/routes"
    assert_error(
        await admin.post(url, json={"provider": "listed", "upstream_model": "gpt-9"}),
        400,
        "upstream_model",
    )
    added = await admin.post(url, json={"provider": "listed", "upstream_model": "gpt-4o"})
    assert added.status_code == 201, added.text
    assert_error(
        await admin.patch(
            f"{url}/{added.json()['id']}", json={"upstream_model": "gpt-9"}, headers=match(added)
        ),
        400,
        "upstream_model",
    )
    # a provider whose inventory was never listed takes any upstream model
    anything = await admin.post(url, json={"provider": "unlisted", "upstream_model": "whatever"})
    assert anything.status_code == 201, anything.text


def test_the_virtual_image_model_is_the_named_exception() -> None:
    from llmrelay.admin.models.inventory import offered
    from llmrelay.store.models import Provider

    codex = Provider(id="p", slug="codex", type="openai_codex", model_inventory=[{"id": "gpt-5"}])
    assert offered(codex, "gpt-image-2")
    assert not offered(codex, "gpt-image-1")
    other = Provider(id="q", slug="o", type="openai", model_inventory=[{"id": "gpt-5"}])
    assert not offered(other, "gpt-image-2")
