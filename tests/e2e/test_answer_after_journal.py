"""A JSON answer leaves the gateway only after its record is in the journal
(Dispatcher.answer_json), so a process killed while it answers (kill -9, the OOM killer)
cannot have served an answer that nothing records or charges.

Until R49 the answer was sent first and the call ended after: a replica killed in that moment
had served a 200 whose record existed nowhere, and whose prepaid reservation the
reconciliation could only keep as `metering_failed`
(tests/e2e/test_replicas_money.py (b) failed on it once). The window is microseconds, so no
kill can aim at it; the order itself is what is checked here, in the system calls of a real
`serve` under strace: the journal's write naming the request comes before the socket write
that carries the answer (its head names the request too), for a provider's answer and for
the gateway's own error answer.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream
from tests.support.services import REQUIRE_SERVICES, skipped_services

pytestmark = pytest.mark.e2e
KEY = "answer-after-journal-key-0123456789"
#: Generous: each wait ends at the event, long before this.
CEILING_S = 60.0


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = f"""
providers: [{{slug: up, type: openai_compatible, base_url: "{upstream.base_url}"}}]
models: [{{name: chat, routes: [{{provider: up, upstream_model: echo}}]}}]
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    yield from serving(Path(tmp_path_factory.mktemp("answer-after-journal")), config)


def _strace() -> str:
    found = shutil.which("strace")
    if found is not None:
        return found
    if REQUIRE_SERVICES:  # .ci/run installs it
        pytest.fail("strace is not installed (LLMRELAY_TEST_REQUIRE_SERVICES=1)")
    skipped_services.add("strace (Debian package strace)")
    pytest.skip("strace is not installed")


#: Each protocol's call (path under the gateway, body) and the status it gets here.
CALLS = {
    "chat": ("v1/chat/completions", {"messages": [{"role": "user", "content": "{id}"}]}, 200),
    "messages": (
        "v1/messages",
        {"max_tokens": 16, "messages": [{"role": "user", "content": "{id}"}]},
        200,
    ),
    "responses": ("v1/responses", {"input": "{id}", "store": False}, 200),
    "gemini": (
        "v1beta/models/chat:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "{id}"}]}]},
        200,
    ),
    # The gateway's own error answer ends a call too (a chat model serves no embeddings).
    "refused": ("v1/embeddings", {"input": "{id}"}, 400),
}


def _ask(gateway: GatewayProcess, request_id: str, kind: str = "chat") -> int:
    path, body, _status = CALLS[kind]
    payload = orjson.loads(orjson.dumps(body).replace(b"{id}", request_id.encode()))
    if kind != "gemini":  # (Gemini names the model in the path)
        payload["model"] = "chat"
    answer = httpx.post(
        f"{gateway.url}/{path}",
        json=payload,
        headers={
            "x-goog-api-key": KEY,
            "Authorization": f"Bearer {KEY}",
            "X-Request-ID": request_id,
        },
        timeout=CEILING_S,
    )
    return answer.status_code


def _writes(trace: Path, request_id: str) -> list[str]:
    """The traced writes that name `request_id`, in their order: `journal` (its line),
    `answer` (a socket write of a response: its head names the request) or `upstream` (the
    call sent to the provider, which names it too)."""
    kinds = []
    for line in trace.read_text(errors="replace").splitlines():
        if request_id not in line:
            continue
        if ".jsonl>" in line:
            kinds.append("journal")
        elif '>, "HTTP/1.1 ' in line:
            kinds.append("answer")
        else:
            kinds.append("upstream")
    return kinds


@pytest.mark.parametrize("kind", sorted(CALLS))
def test_the_journal_has_the_call_before_the_client_has_its_answer(
    gateway: GatewayProcess, tmp_path: Path, kind: str
) -> None:
    assert gateway.process is not None
    trace = tmp_path / "trace"
    tracer = subprocess.Popen(
        [
            _strace(), "-f", "-qq", "-y", "-s", "4096", "-e", "trace=write,writev,sendto,sendmsg",
            "-e", "signal=none", "-o", str(trace), "-p", str(gateway.process.pid),
        ]
    )  # fmt: skip
    try:
        # Attached once a request's writes show in the trace (strace says nothing before).
        deadline = time.monotonic() + CEILING_S
        while True:
            probe = f"probe-{uuid.uuid4().hex[:12]}"
            assert _ask(gateway, probe) == 200
            if trace.exists() and "journal" in _writes(trace, probe):
                break
            assert time.monotonic() < deadline, "strace never showed the gateway's writes"
        request_id = f"order-{uuid.uuid4().hex[:12]}"
        assert _ask(gateway, request_id, kind) == CALLS[kind][2]
        deadline = time.monotonic() + CEILING_S
        while "answer" not in _writes(trace, request_id):
            assert time.monotonic() < deadline, "the answer's write never showed in the trace"
            time.sleep(0.05)
    finally:
        tracer.send_signal(signal.SIGINT)  # detaches; the gateway goes on
        tracer.wait(CEILING_S)
    writes = _writes(trace, request_id)
    assert "journal" in writes, writes
    assert writes.index("journal") < writes.index("answer"), writes
