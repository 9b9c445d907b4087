"""Search, sort and pages for the console's lists of rows the admin API answers whole
(projects, keys, providers, models, users, tenants, policies, guardrails): `?q=` keeps the
rows whose shown fields contain the words typed, `?sort=column` (`-column` descending)
orders them, `?page=N` shows 25 at a time. The lists the admin API pages itself by cursor
(activity, audit, jobs, the ledger) keep their cursors and filters.

The query stays in the URL: a search can be bookmarked, shared and reloaded."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

PAGE_SIZE = 25


@dataclass(frozen=True, slots=True)
class Column:
    """A sortable column: its name in `?sort=`, its heading, and how a row is ordered."""

    name: str
    label: str
    key: Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Listing:
    rows: list[Mapping[str, Any]]
    total: int  # rows matching the search, all pages
    everything: int  # rows before the search
    q: str
    sort: str
    page: int
    pages: int
    columns: tuple[Column, ...]
    params: dict[str, str]  # the page's other query parameters (filters), kept in links

    def href(self, **change: Any) -> str:
        """A link to this list with some parameters changed (empty ones left out)."""
        query = {**self.params, "q": self.q, "sort": self.sort, "page": str(self.page)}
        query.update({k: str(v) for k, v in change.items()})
        if query.get("page") == "1":
            query.pop("page")
        return "?" + urlencode({k: v for k, v in query.items() if v})

    def sort_href(self, column: str) -> str:
        """Sort by `column`, or the other way when it is the current order."""
        return self.href(sort=f"-{column}" if self.sort == column else column, page=1)

    def sorted_by(self, column: str) -> str | None:
        """`ascending`/`descending` for the current order's column (aria-sort), else None."""
        if self.sort == column:
            return "ascending"
        if self.sort == f"-{column}":
            return "descending"
        return None


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        return " ".join(_text(v) for v in value.values())
    if isinstance(value, list | tuple):
        return " ".join(_text(v) for v in value)
    return "" if value is None else str(value)


def _order(value: Any) -> tuple[int, Any]:
    """None last, numbers as numbers, text without case."""
    if value is None or value == "":
        return (1, "")
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, int | float):
        return (0, value)
    return (0, str(value).lower())


def listing(
    rows: Sequence[Mapping[str, Any]],
    query: Mapping[str, str],
    columns: Sequence[Column],
    searched: Sequence[str],
    default_sort: str,
    keep: Sequence[str] = (),
    page_size: int = PAGE_SIZE,
) -> Listing:
    """`rows` searched over the fields `searched`, sorted by `?sort=` (a column's name, or
    `default_sort`), one page of them."""
    q = query.get("q", "").strip()[:200]
    words = q.lower().split()
    found = [
        row
        for row in rows
        if all(word in " ".join(_text(row.get(f)) for f in searched).lower() for word in words)
    ]
    by_name = {c.name: c for c in columns}
    sort = query.get("sort", default_sort)
    column = by_name.get(sort.lstrip("-"))
    if column is None:
        sort, column = default_sort, by_name[default_sort.lstrip("-")]
    found.sort(key=lambda row: _order(column.key(row)), reverse=sort.startswith("-"))
    pages = max(1, -(-len(found) // page_size))
    raw = query.get("page", "1")
    page = min(max(int(raw), 1), pages) if raw.isdigit() else 1
    start = (page - 1) * page_size
    return Listing(
        rows=found[start : start + page_size],
        total=len(found),
        everything=len(rows),
        q=q,
        sort=sort,
        page=page,
        pages=pages,
        columns=tuple(columns),
        params={k: query[k] for k in keep if query.get(k)},
    )


def field(name: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda row: row.get(name)
