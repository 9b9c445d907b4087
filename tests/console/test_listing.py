"""Search, sort and pages over a whole list, as the URL asks for them."""

from __future__ import annotations

from llmrelay.console.listing import PAGE_SIZE, Column, field, listing

ROWS = [
    {"name": f"key-{n:02d}", "status": "revoked" if n % 3 else "active", "used": n % 5}
    for n in range(60)
]
COLUMNS = (Column("name", "Name", field("name")), Column("used", "Used", field("used")))


def test_search_keeps_rows_with_every_word() -> None:
    found = listing(ROWS, {"q": "KEY-0 active"}, COLUMNS, ("name", "status"), "name")
    assert [r["name"] for r in found.rows] == ["key-00", "key-03", "key-06", "key-09"]
    assert (found.total, found.everything, found.pages) == (4, 60, 1)


def test_sort_both_ways_and_unknown_columns_fall_back() -> None:
    down = listing(ROWS, {"sort": "-name"}, COLUMNS, ("name",), "name")
    assert down.rows[0]["name"] == "key-59"
    assert down.sorted_by("name") == "descending"
    assert down.sort_href("name") == "?sort=name"  # the other way
    by_use = listing(ROWS, {"sort": "used"}, COLUMNS, ("name",), "name")
    assert [r["used"] for r in by_use.rows[:3]] == [0, 0, 0]
    odd = listing(ROWS, {"sort": "password"}, COLUMNS, ("name",), "name")
    assert odd.sort == "name"


def test_pages_and_links_keep_the_query() -> None:
    last = listing(
        ROWS, {"page": "99", "status": "x"}, COLUMNS, ("name",), "name", keep=("status",)
    )
    assert (last.page, last.pages, len(last.rows)) == (3, 3, 60 - 2 * PAGE_SIZE)
    assert last.href(page=2) == "?status=x&sort=name&page=2"
    assert last.href(page=1) == "?status=x&sort=name"
    assert listing(ROWS, {"page": "nonsense"}, COLUMNS, ("name",), "name").page == 1
