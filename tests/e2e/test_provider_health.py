"""A provider whose credential is refused, end to end in one `serve` process with its job
runner (short probe waits): the refusal queues a probe, the probe marks the provider
unavailable and routing leaves it out (failover goes straight to the backup; a request pinned
to it gets 503), and once the operator fixes the credential the waiting probe runs at once,
finds it online and routing takes it back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

pytestmark = pytest.mark.e2e

KEY = "e2e-health-key-0123456789"
ADMIN = "e2e-health-admin-token-0123456789"
REFUSED = "sk-flaky-refused-0123456789"
GOOD = "sk-backup-good-0123456789"


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    upstream.refused_keys.add(REFUSED)
    config = f"""
providers:
  - {{slug: flaky, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {REFUSED}}}
  - {{slug: backup, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {GOOD}}}
models:
  - name: chat
    routes:
      - {{provider: flaky, upstream_model: echo, priority: 0}}
      - {{provider: backup, upstream_model: echo, priority: 1}}
projects: [{{name: p, keys: [{{name: k, key: {KEY}}}]}}]
"""
    env = {
        "LLMRELAY_ADMIN_TOKEN": ADMIN,
        "LLMRELAY_PROBE_DELAYS_S": "1,2",
        "LLMRELAY_JOBS_POLL_S": "0.1",
    }
    yield from serving(tmp_path_factory.mktemp("health"), config, env)


def _chat(gateway: GatewayProcess, model: str = "chat") -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )


def _refused_as_unavailable(answer: httpx.Response) -> httpx.Response | None:
    """The answer if it is the 503 of a provider left out of routing, else None."""
    if answer.status_code != 503:
        return None
    return answer if answer.json()["error"]["code"] == "providers_unavailable" else None


def _denied(gateway: GatewayProcess) -> float:
    text = httpx.get(f"{gateway.url}/metrics", timeout=5).text
    line = next(line for line in text.splitlines() if line.startswith("llmrelay_providers_denied "))
    return float(line.split()[1])


def _until(seconds: float, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.1)


def test_a_refused_credential_takes_the_provider_out_until_it_is_fixed(
    gateway: GatewayProcess, upstream: MockUpstream
) -> None:
    admin = httpx.Client(
        base_url=f"{gateway.url}/api/admin", headers={"Authorization": f"Bearer {ADMIN}"}
    )

    def health(slug: str) -> dict[str, Any]:
        rows = admin.get("/providers/health").json()["data"]
        return next(row for row in rows if row["slug"] == slug)

    with admin:
        served = _chat(gateway)  # flaky refuses the key: the backup answers
        assert served.status_code == 200, served.text
        assert served.headers["x-llmrelay-provider"] == "backup"
        flaky = _until(10, lambda: (row := health("flaky"))["status"] == "unavailable" and row)
        assert flaky["reason"] == "credentials_refused" and REFUSED not in str(flaky)
        assert health("backup")["status"] == "online"

        # Left out of routing: pinned requests get 503, the others go to the backup untried.
        # Until the gateway's snapshot has the health row (a poll or signal away, seconds on
        # a loaded machine), flaky is still routed and its breaker, opened by the refusal,
        # answers 503 routes_cooling_down: wait for the state this test is about.
        pinned = _until(15, lambda: _refused_as_unavailable(_chat(gateway, "chat:flaky")))
        assert pinned.status_code == 503
        assert _denied(gateway) == 1.0
        refusals = upstream.refusals
        for _ in range(10):
            answer = _chat(gateway)
            assert answer.headers["x-llmrelay-provider"] == "backup"
        # No request knocked on flaky's door (each would be a refusal): only the probe does,
        # every second or two.
        assert upstream.refusals - refusals < 10

        # The operator fixes the credential: the waiting probe runs now and finds it online.
        fixed = admin.patch(
            f"/providers/{flaky['provider_id']}", json={"api_key": GOOD}, headers={"If-Match": "*"}
        )
        assert fixed.status_code == 200, fixed.text
        _until(10, lambda: health("flaky")["status"] == "online")
        back = _until(5, lambda: (r := _chat(gateway, "chat:flaky")).status_code == 200 and r)
        assert back.headers["x-llmrelay-provider"] == "flaky"
        assert _chat(gateway).headers["x-llmrelay-provider"] == "flaky"
        assert _denied(gateway) == 0.0

        probes = admin.get("/jobs", params={"kind": "provider_probe"}).json()["data"]
        # One probe for the burst of refusals; the backup, never refused, was never probed.
        assert [(p["payload"]["provider_id"], p["status"]) for p in probes] == [
            (flaky["provider_id"], "succeeded")
        ]
