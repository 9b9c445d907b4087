"""GET /api/admin/catalogue: the bundled catalogue with the list price in force, for any
signed-in caller (the permission matrix covers the roles); nobody else."""

from __future__ import annotations

import httpx
import pytest

from llmrelay.metering.catalogue import bundled


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_catalogue_with_prices_in_force(
    admin: httpx.AsyncClient, database_url: str
) -> None:
    answer = await admin.get("/catalogue")
    assert answer.status_code == 200
    rows = {row["id"]: row for row in answer.json()["data"]}
    assert set(rows) == set(bundled().models)
    mini = rows["gpt-4o-mini"]
    assert mini["provider"] == "openai"
    assert mini["context_window"] == 128000
    assert mini["price"]["input_per_mtok"] == 0.15
    assert mini["price"]["output_per_mtok"] == 0.6
    # o3's price changed on 2025-06-10: the later one is in force
    assert rows["o3"]["price"]["input_per_mtok"] == 2.0
    assert rows["o3"]["price"]["since"].startswith("2025-06-10")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_catalogue_needs_a_caller(
    anonymous: httpx.AsyncClient, database_url: str
) -> None:
    answer = await anonymous.get("/catalogue")
    assert answer.status_code == 401
