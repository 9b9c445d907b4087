"""Load and a money audit for the prepaid replica tests (tests/e2e/test_replicas_money.py).

`Load` sends chat requests through nginx, many at once (aiohttp, one connection each), from a
thread of its own, so the test can kill or restart a service while they are in flight; each
request carries its own `X-Request-ID`, so the audit finds its reservation, ledger entries
and record whatever answer the client got (or none: a replica killed under it).

`audit` reads the database straight (asyncpg) and checks the money to the micro-unit: each
wallet is what its ledger entries add up to, nothing is left `held`, what stays reserved is
exactly the `metering_failed` reservations, each reservation was closed at most once and
its entries move exactly what it charged, every settled reservation charged its record's
cost, and every 200 a client saw has one charge of its record's exact cost."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
import orjson

#: Ledger entry kinds that add money to a wallet.
CREDITS = ("topup", "adjustment", "refund")


@dataclass(frozen=True)
class Answer:
    """What a client got: the HTTP status (0: no answer at all) and the error's code."""

    status: int
    code: str | None = None


@dataclass(frozen=True)
class Req:
    request_id: str
    key: str
    model: str


def content(request_id: str) -> str:
    """The prompt: the same length for every request id of the same length (so each
    reserves the same), and the id in it, so the upstream's log tells whose call it got."""
    return f"money for {request_id}"


async def _send(session: aiohttp.ClientSession, url: str, req: Req) -> Answer:
    body = {
        "model": req.model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": content(req.request_id)}],
    }
    headers = {"Authorization": f"Bearer {req.key}", "X-Request-ID": req.request_id}
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            raw = await r.read()
            code = None
            if r.status != 200 and r.content_type == "application/json":
                code = orjson.loads(raw).get("error", {}).get("code")
            return Answer(r.status, code)
    except (aiohttp.ClientError, TimeoutError):
        return Answer(0)


async def _run(
    url: str, requests: list[Req], stop: threading.Event | None, pace_s: float
) -> dict[str, Answer]:
    """All of `requests` at once; or, with `stop`, one after another (`pace_s` apart) on each
    of len(requests) lanes until `stop` is set: request ids get a `-<n>` suffix."""
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if stop is None:
            answers = await asyncio.gather(*(_send(session, url, req) for req in requests))
            return {req.request_id: a for req, a in zip(requests, answers, strict=True)}
        found: dict[str, Answer] = {}

        async def lane(req: Req) -> None:
            n = 0
            while not stop.is_set():
                one = Req(f"{req.request_id}-{n:04d}", req.key, req.model)
                found[one.request_id] = await _send(session, url, one)
                n += 1
                await asyncio.sleep(pace_s)  # pacing the load, not waiting for an event

        await asyncio.gather(*(lane(req) for req in requests))
        return found


class Load:
    """Requests sent from a thread of their own; `wait()` returns their answers."""

    def __init__(
        self,
        url: str,
        requests: list[Req],
        *,
        until: threading.Event | None = None,
        pace_s: float = 0.1,
    ) -> None:
        self.answers: dict[str, Answer] = {}
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self.answers = asyncio.run(_run(url, requests, until, pace_s))
            except BaseException as error:  # noqa: BLE001 - handed to wait()
                self._error = error

        self._thread = threading.Thread(target=run, name="money-load", daemon=True)
        self._thread.start()

    def wait(self, timeout_s: float = 240) -> dict[str, Answer]:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the load did not end within {timeout_s} s"
        if self._error is not None:
            raise self._error
        return self.answers


def wait_for(
    check: Callable[[], Any],
    timeout_s: float,
    what: str,
    detail: Callable[[], Any] | None = None,
) -> Any:
    """The first truthy `check()`, polled until `timeout_s` (then fail, naming `what` and
    what `detail()` says of the state it was waiting on)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= deadline:
            said = "" if detail is None else f": {detail()}"
            raise AssertionError(f"not within {timeout_s} s: {what}{said}")
        time.sleep(0.1)


@dataclass
class Books:
    """The money tables of some tenants, read in one go."""

    wallets: dict[str, tuple[int, int]]
    entries: list[dict[str, Any]]
    reservations: dict[str, dict[str, Any]]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


async def _read(url: str, tenants: list[str]) -> Books:
    conn = await asyncpg.connect(url)
    try:
        wallets = {
            str(r["tenant_id"]): (int(r["balance_micros"]), int(r["reserved_micros"]))
            for r in await conn.fetch(
                "SELECT tenant_id, balance_micros, reserved_micros FROM wallets"
                " WHERE tenant_id = ANY($1::text[])",
                tenants,
            )
        }
        entries = [
            dict(r)
            for r in await conn.fetch(
                "SELECT id, tenant_id, kind, request_id, amount_micros, reserved_delta_micros,"
                " balance_after_micros, reserved_after_micros FROM ledger_entries"
                " WHERE tenant_id = ANY($1::text[]) ORDER BY id",
                tenants,
            )
        ]
        reservations = {
            str(r["request_id"]): dict(r)
            for r in await conn.fetch(
                "SELECT request_id, tenant_id, amount_micros, status, charged_micros"
                " FROM reservations WHERE tenant_id = ANY($1::text[])",
                tenants,
            )
        }
        records = {
            str(r["request_id"]): dict(r)
            for r in await conn.fetch(
                "SELECT request_id, status_code, cost_micros FROM request_records"
                " WHERE tenant_id = ANY($1::text[])",
                tenants,
            )
        }
    finally:
        await conn.close()
    return Books(wallets, entries, reservations, records)


def books(url: str, tenants: list[str]) -> Books:
    return asyncio.run(_read(url, tenants))


def unsettled(url: str, tenants: list[str]) -> int:
    """How many of these tenants' reservations the gateway has still to close: `held`, or kept
    `metering_failed` while the request's record says it was served (a record spooled through
    a database outage lands after the reconciliation that found none; the next run settles
    it from the record, and so does the settle the serving replica kept in memory)."""
    found = books(url, tenants)
    return sum(
        1
        for rid, r in found.reservations.items()
        if r["status"] == "held"
        or (
            r["status"] == "metering_failed"
            and found.records.get(rid, {}).get("status_code") == 200
        )
    )


def audit(url: str, tenants: list[str], answers: dict[str, Answer]) -> Counter[str]:
    """Check the money (module docstring); what the reservations of `answers` ended as."""
    found = books(url, tenants)
    by_request: dict[str, list[dict[str, Any]]] = {}
    for tenant in tenants:
        mine = [e for e in found.entries if e["tenant_id"] == tenant]
        available = sum(int(e["amount_micros"]) for e in mine)
        reserved = sum(int(e["reserved_delta_micros"]) for e in mine)
        assert found.wallets[tenant] == (available, reserved), (tenant, found.wallets[tenant])
        last = mine[-1]
        assert (last["balance_after_micros"], last["reserved_after_micros"]) == (
            available,
            reserved,
        )
        kept = [r for r in found.reservations.values() if r["tenant_id"] == tenant]
        assert not [r["request_id"] for r in kept if r["status"] == "held"]
        # What stays reserved is exactly what waits for an operator.
        waiting = sum(int(r["amount_micros"]) for r in kept if r["status"] == "metering_failed")
        assert reserved == waiting, (tenant, reserved, waiting)
        credited = sum(int(e["amount_micros"]) for e in mine if e["kind"] in CREDITS)
        charged = sum(int(r["charged_micros"] or 0) for r in kept)
        assert available == credited - charged - waiting, (tenant, available, credited, charged)
        for entry in mine:
            if entry["request_id"] is not None and entry["kind"] not in CREDITS:
                by_request.setdefault(str(entry["request_id"]), []).append(entry)

    for request_id, reservation in found.reservations.items():
        entries = by_request.pop(request_id, [])
        kinds = Counter(e["kind"] for e in entries)
        closed = kinds["charge"] + kinds["release"]
        assert kinds["reserve"] == 1 and closed <= 1, (request_id, kinds)
        moved = sum(int(e["amount_micros"]) for e in entries)
        still = sum(int(e["reserved_delta_micros"]) for e in entries)
        if reservation["status"] == "metering_failed":
            assert kinds["charge"] + kinds["release"] == 0
            assert (moved, still) == (-reservation["amount_micros"], reservation["amount_micros"])
            continue
        assert kinds["charge"] + kinds["release"] == 1, (request_id, kinds)
        assert (moved, still) == (-int(reservation["charged_micros"]), 0), request_id
        if reservation["status"] == "settled":
            record = found.records.get(request_id)
            assert record is not None, f"{request_id} was charged without a record"
            assert reservation["charged_micros"] == record["cost_micros"] > 0, request_id
    assert not by_request, f"ledger entries without a reservation: {sorted(by_request)[:5]}"

    ended: Counter[str] = Counter()
    for request_id, answer in answers.items():
        ending = found.reservations.get(request_id)
        ended[ending["status"] if ending else "none"] += 1
        if answer.status != 200:
            continue
        record = found.records.get(request_id)
        assert record is not None and record["status_code"] == 200, (request_id, record)
        assert ending is not None, f"{request_id}: a 200 served without a reservation"
        assert (ending["status"], ending["charged_micros"]) == (
            "settled",
            record["cost_micros"],
        ), (request_id, ending, record)
    return ended
