"""Graceful drain under load: SIGTERM reaches `llmrelay serve` while 200 streams are open.
None is cut (each ends with its finish reason and `[DONE]`), every one is recorded, new
connections are refused while they finish, and the process exits 0 within
LLMRELAY_DRAIN_TIMEOUT_S."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from pathlib import Path

import httpx

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

KEY = "drain-load-key-0123456789"
STREAMS = 200
DRAIN_TIMEOUT_S = 40.0
#: Each stream: 16 words, one every 750 ms upstream: about 12 s, most of it after SIGTERM (so
#: that on a loaded machine too none ends before the refusal is seen).
WORDS = " ".join(f"w{n}" for n in range(16))


def _config(upstream: MockUpstream) -> str:
    return f"""
providers: [{{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}]
models: [{{name: paced, routes: [{{provider: up, upstream_model: paced-750}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""


async def _stream(
    client: httpx.AsyncClient, gateway: GatewayProcess, n: int, opened: asyncio.Queue[int]
) -> bytes:
    body = b""
    async with client.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": f"drain-{n}"},
        json={"model": "paced", "stream": True, "messages": [{"role": "user", "content": WORDS}]},
    ) as answer:
        assert answer.status_code == 200
        async for chunk in answer.aiter_bytes():
            if not body:
                opened.put_nowait(n)
            body += chunk
    return body


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except ConnectionRefusedError:
        return True


async def _drain_under_load(gateway: GatewayProcess) -> tuple[list[bytes], int, float, float]:
    """(the streams' bodies, streams finished when new connections were first refused,
    seconds from SIGTERM to that refusal, seconds from SIGTERM to the exit)."""
    assert gateway.process is not None
    opened: asyncio.Queue[int] = asyncio.Queue()
    limits = httpx.Limits(max_connections=STREAMS + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        tasks = [asyncio.create_task(_stream(client, gateway, n, opened)) for n in range(STREAMS)]
        async with asyncio.timeout(60):
            for _ in range(STREAMS):  # every stream has its first bytes: all are open
                await opened.get()
        signalled = time.monotonic()
        gateway.process.send_signal(signal.SIGTERM)
        while not await asyncio.to_thread(_refused, gateway.port):
            assert time.monotonic() - signalled < 10, "still accepting connections"
            await asyncio.sleep(0.05)
        refused_after = time.monotonic() - signalled
        finished_then = sum(task.done() for task in tasks)
        bodies = await asyncio.gather(*tasks)
    code = await asyncio.to_thread(gateway.process.wait, 60)
    assert code == 0, gateway.logs()
    return bodies, finished_then, refused_after, time.monotonic() - signalled


def test_sigterm_with_200_open_streams_cuts_none_records_all_and_exits_0(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    env = {"LLMRELAY_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S)}
    gateway = GatewayProcess(tmp_path, config=_config(upstream), env=env).start()
    try:
        bodies, finished_then, refused_after, exited_after = asyncio.run(_drain_under_load(gateway))
    finally:
        gateway.stop()
    # New connections were refused while the streams were still running.
    assert finished_then == 0, f"{finished_then} streams had ended before the refusal"
    assert refused_after < 10
    # None was cut: each carries every word, its finish reason, and ends with [DONE].
    for body in bodies:
        assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
        assert b'"finish_reason":"stop"' in body and b'"error"' not in body
        assert body.count(b'"content":"w') == 16
    assert exited_after < DRAIN_TIMEOUT_S
    ids = [f"drain-{n}" for n in range(STREAMS)]
    records = gateway.records(ids, timeout_s=0)  # written before the exit
    assert len(records) == STREAMS
    assert {row["status_code"] for row in records.values()} == {200}
    assert {row["stream"] for row in records.values()} == {1}
    assert "record_drain_timeout" not in gateway.logs()
