"""Projects over the real admin app: CRUD, validation naming the field, ETag / If-Match, the
config generation, and the data plane's snapshot."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.admin.support import assert_error, generation, match, snapshot, walk_pages


async def test_create_list_get_update_delete(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    before = await generation(engine)
    created = await admin.post(
        "/projects",
        json={"name": "acme", "limits": {"rpm": 60}, "monthly_budget_usd": 12.5},
    )
    assert created.status_code == 201, created.text
    project = created.json()
    assert created.headers["ETag"] == '"1"'
    assert project["limits"] == {"rpm": 60, "tpm": None, "concurrency": None}
    assert project["monthly_budget_micros"] == 12_500_000
    assert project["models"] is None
    assert await generation(engine) == before + 1

    listed = (await admin.get("/projects")).json()
    assert [p["name"] for p in listed["data"]] == ["acme"]
    assert listed["next_cursor"] is None

    fetched = await admin.get(f"/projects/{project['id']}")
    assert fetched.json() == project

    changed = await admin.patch(
        f"/projects/{project['id']}", json={"models": []}, headers=match(fetched)
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["models"] == []
    assert changed.json()["limits"]["rpm"] == 60  # untouched fields stay
    assert changed.headers["ETag"] == '"2"'
    assert await generation(engine) == before + 2

    gone = await admin.delete(f"/projects/{project['id']}", headers=match(changed))
    assert gone.status_code == 204
    assert_error(await admin.get(f"/projects/{project['id']}"), 404)
    assert (await admin.get("/projects")).json()["data"] == []


async def test_validation_names_the_field(admin: httpx.AsyncClient) -> None:
    assert_error(await admin.post("/projects", json={"name": "bad name!"}), 400, "name")
    assert_error(
        await admin.post("/projects", json={"name": "p", "limits": {"rpm": 0}}), 400, "limits.rpm"
    )
    assert_error(
        await admin.post("/projects", json={"name": "p", "models": ["nope"]}), 400, "models[0]"
    )
    assert_error(
        await admin.post("/projects", json={"name": "p", "routing_policy": "nope"}),
        400,
        "routing_policy",
    )
    assert_error(await admin.post("/projects", json={"name": "p", "color": "red"}), 400, "color")
    assert_error(await admin.post("/projects", json={"name": "p", "keys": [{"name": "k"}]}), 400)
    assert (await admin.post("/projects", json={"name": "p"})).status_code == 201
    assert_error(await admin.post("/projects", json={"name": "p"}), 409, "name")
    project = (await admin.get("/projects", params={"name": "p"})).json()["data"][0]
    response = await admin.patch(
        f"/projects/{project['id']}",
        json={"monthly_budget_usd": -1},
        headers={"If-Match": '"1"'},
    )
    assert_error(response, 400, "monthly_budget_usd")


async def test_if_match_is_required_and_checked(admin: httpx.AsyncClient) -> None:
    created = await admin.post("/projects", json={"name": "acme"})
    url = f"/projects/{created.json()['id']}"
    assert_error(await admin.patch(url, json={"models": []}), 428, "If-Match")
    assert_error(await admin.delete(url), 428)
    first = await admin.patch(url, json={"models": []}, headers=match(created))
    assert first.status_code == 200
    # a second admin still holding version 1 cannot overwrite the change
    assert_error(await admin.patch(url, json={"models": None}, headers=match(created)), 409)
    assert_error(await admin.delete(url, headers=match(created)), 409)
    assert (await admin.get(url)).json()["models"] == []


async def test_pagination_walks_every_row_once(admin: httpx.AsyncClient) -> None:
    names = {f"p{i}" for i in range(7)}
    for name in names:
        assert (await admin.post("/projects", json={"name": name})).status_code == 201
    walked = await walk_pages(admin, "/projects", limit=3)
    assert all(len(page) <= 3 for page in walked)
    seen = [p["name"] for page in walked for p in page]
    assert sorted(seen) == sorted(names)
    assert_error(await admin.get("/projects", params={"cursor": "%%%"}), 400, "cursor")
    assert_error(await admin.get("/projects", params={"limit": 0}), 400, "limit")


async def test_a_change_reaches_the_snapshot(admin: httpx.AsyncClient, engine: AsyncEngine) -> None:
    created = await admin.post("/projects", json={"name": "acme"})
    key = await admin.post(f"/projects/{created.json()['id']}/keys", json={"name": "ci"})
    assert key.status_code == 201, key.text
    await admin.patch(
        f"/projects/{created.json()['id']}",
        json={"limits": {"rpm": 7}},
        headers=match(created),
    )
    served = await snapshot(engine)
    [principal] = served.keys_by_digest.values()
    assert principal.project.limits.rpm == 7


async def test_racing_writers_cannot_both_win(
    admin: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """Both passed their If-Match check on version 1; the database's version check refuses
    the one that writes second (the API answers it with 409)."""
    from sqlalchemy.orm.exc import StaleDataError

    from llmrelay.admin.projects import repository, service
    from llmrelay.store.db import session_factory

    created = (await admin.post("/projects", json={"name": "acme"})).json()
    sessions = session_factory(engine)
    async with sessions() as first, sessions() as second:
        mine = await repository.get(first, created["id"])
        theirs = await repository.get(second, created["id"])
        assert mine is not None and theirs is not None
        assert mine.version == theirs.version == 1
        await service.update_project(first, mine, {"models": []})
        await first.commit()
        with pytest.raises(StaleDataError):
            await service.update_project(second, theirs, {"limits": {"rpm": 5}})
    fetched = (await admin.get(f"/projects/{created['id']}")).json()
    assert (fetched["models"], fetched["limits"]["rpm"]) == ([], None)
