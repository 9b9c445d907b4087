"""The real Codex CLI through llmrelay to an `openai_codex` provider: a ChatGPT subscription
as the upstream of the Responses API (issue 34), end to end with the real client.

The stand-in ChatGPT issuer and Codex backend (tests/support/mock_codex.py) answers as the
agent tests' scripted model (`scripted`): Codex's own shell tool is called to run `echo
AGENT-<token> | tee FILE`, and once its output comes back the answer quotes it. An account is
signed in through the admin API's device code flow, as the console does. What is checked is
what really happened: Codex's final answer, the file its tool wrote, the backend calls (each
signed with the signed-in account's access token and `chatgpt-account-id`, the prompt cache
following Codex's session, never the gateway key Codex presented), and the gateway's records
(provider, upstream model, the account's resource, Codex's user agent).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents.cells import RECALL_PROMPT
from tests.support.agent_clients import CODEX, Endpoint, need, run
from tests.support.codex_flow import ADMIN, admin_sign_in, codex_server, until
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_codex import MockCodex

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

KEY = "agent-codex-subscription-key-0123456789"
ACCOUNT = ("acct-codex-cli", "codex-cli@example.com")


@pytest.fixture(scope="module")
def codex() -> Iterator[MockCodex]:
    yield from codex_server(account_id=ACCOUNT[0], email=ACCOUNT[1], scripted=True)


@pytest.fixture(scope="module")
def gateway(codex: MockCodex, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = f"""
providers:
  - {{slug: chatgpt, type: openai_codex, base_url: "{codex.backend}"}}
models:
  - {{name: codex-sub, routes: [{{provider: chatgpt, upstream_model: gpt-5-codex}}]}}
projects:
  - name: agents
    keys: [{{name: k, key: {KEY}}}]
"""
    env = {"LLMRELAY_CODEX_ISSUER": codex.issuer, "LLMRELAY_ADMIN_TOKEN": ADMIN}
    process = GatewayProcess(tmp_path_factory.mktemp("gateway"), config=config, env=env)
    process.start(timeout_s=90)  # generous: other agent modules may be loading the machine
    yield process
    assert process.stop() == 0, process.logs()


@pytest.fixture(scope="module")
def account(gateway: GatewayProcess, codex: MockCodex) -> dict[str, Any]:
    """The account signed in through the admin API, once the gateway serves it."""
    headers = {"authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"{gateway.url}/api/admin", headers=headers, timeout=120) as admin:
        signed_in = admin_sign_in(admin, codex)

    def served() -> bool:  # the gateway reads the new account within a snapshot poll
        answer = httpx.post(
            f"{gateway.base_url}/responses",
            headers={"authorization": f"Bearer {KEY}"},
            json={"model": "codex-sub", "input": "ready"},
            timeout=120,
        )
        if answer.status_code == 503:
            return False
        assert answer.status_code == 200, answer.text
        return True

    until(served, "the signed-in account served")
    return signed_in


def test_codex_runs_its_tool_loop_on_a_chatgpt_subscription(
    gateway: GatewayProcess, codex: MockCodex, account: dict[str, Any], tmp_path: Path
) -> None:
    need(CODEX)
    token = f"AGENT-{secrets.token_hex(5)}"
    home = tmp_path / "home"
    before = len(codex.backend_calls("/responses"))
    prompt = f"Run the shell command `echo {token} | tee codex-ran.txt` and say what it printed."
    endpoint = Endpoint(gateway.url, KEY, "codex-sub")
    done = run(CODEX, endpoint, prompt, home, 150)
    calls = codex.backend_calls("/responses")[before:]
    seen = done.describe() + "\n--- backend answers\n" + "\n".join(codex.answers)

    # Codex's answer, and the tool it really ran (the file is on disk in its working folder).
    assert done.exit_code == 0, seen
    assert f"The command printed {token}." in done.stdout, seen
    assert (home / "work" / "codex-ran.txt").read_text() == f"{token}\n", seen

    # The backend saw the loop: a call of the shell tool, then its output sent back.
    assert len(calls) >= 2, seen
    outputs = [
        item
        for _, _, body in calls
        for item in body["input"]
        if item.get("type") == "function_call_output"
    ]
    assert any(token in str(item.get("output")) for item in outputs), seen
    asked = [body for _, _, body in calls if token in str(body["input"])]
    assert asked, seen
    for _, headers, body in calls:
        bearer = headers["authorization"].removeprefix("Bearer ")
        assert codex.holder(bearer) == ACCOUNT[0]
        assert headers["chatgpt-account-id"] == ACCOUNT[0] == account["account_id"]
        assert headers["originator"] == "codex_cli_rs"
        assert KEY not in str(headers) and KEY not in str(body)  # the gateway key stays here
        assert body["model"] == "gpt-5-codex"
        assert body["stream"] is True and body["store"] is False
        # Codex names its session in prompt_cache_key: the backend's cache follows it.
        assert body["prompt_cache_key"] and headers["session_id"] == body["prompt_cache_key"]
    assert len({body["prompt_cache_key"] for _, _, body in calls}) == 1

    # The gateway's records: one per backend call (the call names its request id), on the
    # provider and the account's resource.
    ids = [headers["x-llmrelay-client-request-id"] for _, headers, _ in calls]
    records = gateway.records(ids, timeout_s=60)  # written in batches, off the request path
    assert sorted(records) == sorted(ids), records
    for record in records.values():
        assert record["endpoint"] == "responses" and record["status_code"] == 200, record
        assert record["virtual_model"] == "codex-sub"
        assert record["provider"] == "chatgpt" and record["upstream_model"] == "gpt-5-codex"
        assert record["resource_id"] == account["resource_id"]
        assert record["stream"]
        assert record["user_agent"].startswith("codex_exec/"), record
        assert record["output_tokens"], record

    # A second turn of the same session (`codex exec resume --last`): answerable only from
    # the first turn's tool output, which Codex sends back whole (the backend stores nothing).
    again = run(CODEX, endpoint, RECALL_PROMPT, home, 150, continued=True)
    later = codex.backend_calls("/responses")[before + len(calls) :]
    seen = again.describe() + "\n--- backend answers\n" + "\n".join(codex.answers)
    assert again.exit_code == 0, seen
    assert f"Recalled {token}." in again.stdout, seen
    assert later, seen
    _, headers, body = later[-1]
    assert codex.holder(headers["authorization"].removeprefix("Bearer ")) == ACCOUNT[0]
    assert body["prompt_cache_key"] == calls[0][2]["prompt_cache_key"]  # the same session
    assert any(
        item.get("type") == "function_call_output" and token in str(item.get("output"))
        for item in body["input"]
    ), seen
