"""Several ChatGPT accounts as resources of one `openai_codex` provider, end to end: a real
gateway process, the `llmrelay codex` command and the admin API's device code flow against
the stand-in ChatGPT issuer and Codex backend (tests/support/mock_codex.py), over real HTTP.

Two accounts are signed in (`--resource alice` from the CLI, `bob` from the admin API) on
the resources the YAML declares (alice first by priority). A second sign-in of an account
renews it and leaves the other; each account's token is refreshed on its own; an account at
its usage limit is skipped (not called) until its reset; a conversation stays on the account
that began it, moving only when that account is unavailable."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.codex_flow import (
    admin_client,
    admin_sign_in,
    cli,
    codex_gateway,
    codex_server,
    finished,
    line_matching,
    openai_client,
    provider_id,
    until,
)
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_codex import MockCodex

KEY = "e2e-codex-accounts-key-0123456789"
ALICE = ("acct-alice", "alice@example.com")
BOB = ("acct-bob", "bob@example.com")


def config(codex: MockCodex) -> str:
    return f"""
providers:
  - slug: codex
    type: openai_codex
    base_url: "{codex.backend}"
    resources:
      - {{name: alice, priority: 0}}
      - {{name: bob, priority: 1}}
models:
  - name: codex
    routes: [{{provider: codex, upstream_model: gpt-5-codex}}]
projects:
  - name: codex
    keys: [{{name: k, key: {KEY}}}]
"""


@pytest.fixture(scope="module")
def codex() -> Iterator[MockCodex]:
    yield from codex_server()


@pytest.fixture(scope="module")
def gateway(codex: MockCodex, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from codex_gateway(codex, tmp_path_factory.mktemp("codex-accounts"), config(codex))


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    yield from openai_client(gateway, KEY)


@pytest.fixture(scope="module")
def admin(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    yield from admin_client(gateway)


def cli_sign_in(gateway: GatewayProcess, codex: MockCodex, resource: str) -> str:
    process = cli(gateway, "login", "--provider", "codex", "--device", "--resource", resource)
    codex.approve(line_matching(process, r"enter the code (\S+)").group(1))
    return finished(process)


def served_by(codex: MockCodex, before: int) -> list[str]:
    """The accounts the backend's /responses calls since `before` came as."""
    calls = codex.backend_calls("/responses")[before:]
    return [headers["chatgpt-account-id"] for _, headers, _ in calls]


def ask(client: openai.OpenAI, text: str, conversation: str) -> str:
    answer = client.responses.create(model="codex", input=text, prompt_cache_key=conversation)
    return answer.output_text


def answered(client: openai.OpenAI, text: str, conversation: str) -> bool:
    """Whether the call is served (before the gateway reads a sign-in it is not)."""
    try:
        return ask(client, text, conversation) == text
    except openai.APIStatusError:
        return False


def test_several_accounts_one_provider(
    gateway: GatewayProcess, codex: MockCodex, admin: httpx.Client, client: openai.OpenAI
) -> None:
    # -- two sign-ins: the second adds its account, it does not replace the first ----------
    codex.signing_in(*ALICE)
    assert "as resource 'alice'" in cli_sign_in(gateway, codex, "alice")
    # a probe made before any sign-in took the provider out of routing: probe it again
    assert admin.post(f"/providers/{provider_id(admin)}/test").json()["status"] == "online"
    codex.signing_in(*BOB)
    codex.token_ttl_s = 120  # bob's tokens are due for a refresh at once (300 s margin)
    try:
        bob = admin_sign_in(admin, codex, "bob")
    finally:
        codex.token_ttl_s = 3600
    assert bob["account_id"] == BOB[0] and bob["resource"] == "bob"
    shown = admin.get(f"/providers/{provider_id(admin)}/codex").json()
    listed = [(a["resource"], a["email"]) for a in shown["accounts"]]
    assert listed == [("alice", ALICE[1]), ("bob", BOB[1])]
    assert shown["email"] == ALICE[1]  # the first account, at the top level as before
    status = finished(cli(gateway, "status", "--provider", "codex"))
    assert "codex/alice: alice@example.com" in status and "codex/bob: bob@example.com" in status

    # -- alice (priority 0) serves; bob is not asked, nor refreshed -----------------------
    before = len(codex.backend_calls("/responses"))
    until(lambda: answered(client, "first", "conv-1"), "the accounts read")
    assert set(served_by(codex, before)) == {ALICE[0]}
    assert codex.refreshed == []

    # -- alice's usage limit reached: its 429 moves conv-1 to bob at once -----------------
    codex.resets_at = time.time() + 8
    codex.used_by[ALICE[0]] = 100
    before = len(codex.backend_calls("/responses"))
    assert ask(client, "moved", "conv-1") == "moved"
    assert served_by(codex, before) == [ALICE[0], BOB[0]]
    assert codex.refreshed == [BOB[0]]  # bob's own tokens refreshed before his first call
    # while alice rests, nothing is sent to her: a new conversation goes to bob directly
    before = len(codex.backend_calls("/responses"))
    assert ask(client, "new", "conv-2") == "new"
    assert served_by(codex, before) == [BOB[0]]

    def resting() -> bool:
        """Alice's rest as the database has it: written by a task beside the request (R56:
        on a loaded machine the page was read before it committed)."""
        shown = admin.get(f"/providers/{provider_id(admin)}/codex").json()["accounts"]
        assert shown[1]["exhausted_until"] is None
        return shown[0]["exhausted_until"] is not None

    until(resting, "alice's rest written")

    # -- alice back after her reset: conv-1 stays on bob (still available), a new ---------
    # -- conversation goes to alice again (priority) ---------------------------------------
    codex.used_by[ALICE[0]] = 10

    def alice_serves_again() -> bool:
        mark = len(codex.backend_calls("/responses"))
        ask(client, "fresh", f"conv-new-{mark}")
        return served_by(codex, mark) == [ALICE[0]]

    until(alice_serves_again, "alice's reset")
    before = len(codex.backend_calls("/responses"))
    assert ask(client, "still bob", "conv-1") == "still bob"
    assert served_by(codex, before) == [BOB[0]]
    assert codex.refreshed == [BOB[0]]  # nothing refreshed twice, alice never

    # -- bob's account made unavailable (disabled resource): conv-1 moves to alice ---------
    resources = admin.get(f"/providers/{provider_id(admin)}/resources").json()["data"]
    bob_resource = next(r for r in resources if r["name"] == "bob")
    changed = admin.patch(
        f"/providers/{provider_id(admin)}/resources/{bob_resource['id']}",
        json={"disabled": True},
        headers={"if-match": str(bob_resource["version"])},
    )
    assert changed.status_code == 200, changed.text

    def conv1_on_alice() -> bool:
        mark = len(codex.backend_calls("/responses"))
        ask(client, "back", "conv-1")
        return served_by(codex, mark) == [ALICE[0]]

    until(conv1_on_alice, "the disabled resource left out")


def test_signing_in_again_renews_one_account_and_keeps_the_others(
    gateway: GatewayProcess, codex: MockCodex, admin: httpx.Client
) -> None:
    codex.signing_in(*ALICE)
    again = admin_sign_in(admin, codex, None)  # no resource named: alice keeps hers
    assert again["resource"] == "alice"
    accounts = admin.get(f"/providers/{provider_id(admin)}/codex").json()["accounts"]
    assert sorted(a["resource"] for a in accounts) == ["alice", "bob"]
    # a third account, no resource named: a new resource named after its email
    codex.signing_in("acct-carol", "carol@example.com")
    carol = admin_sign_in(admin, codex, None)
    assert carol["resource"] == "carol"
    # signing one out leaves the others (and the resource)
    gone = admin.delete(f"/providers/{provider_id(admin)}/codex", params={"resource": "carol"})
    assert gone.status_code == 204, gone.text
    accounts = admin.get(f"/providers/{provider_id(admin)}/codex").json()["accounts"]
    assert sorted(a["resource"] for a in accounts) == ["alice", "bob"]
    missing = admin.delete(f"/providers/{provider_id(admin)}/codex", params={"resource": "nobody"})
    assert missing.status_code == 404
    # signed in again with no resource named: it takes back the resource its sign-out left
    # empty, not a new one beside it (which routing would try in vain first)
    codex.signing_in("acct-carol", "carol@example.com")
    assert admin_sign_in(admin, codex, None)["resource"] == "carol"
    resources = admin.get(f"/providers/{provider_id(admin)}/resources").json()["data"]
    assert sorted(r["name"] for r in resources if r["name"].startswith("carol")) == ["carol"]


def test_every_account_unavailable_answers_when_the_soonest_is_back(
    codex: MockCodex, admin: httpx.Client, client: openai.OpenAI
) -> None:
    """Alice at her usage limit and every other resource left empty by a sign-out (bob's is
    tried last, by priority): the 503 carries the Retry-After of alice's reset, not the
    empty resource's silence."""
    provider = provider_id(admin)
    assert admin.delete(f"/providers/{provider}/codex").status_code in (204, 404)  # all out
    codex.signing_in(*ALICE)
    admin_sign_in(admin, codex, "alice")
    resources = admin.get(f"/providers/{provider}/resources").json()["data"]
    bob = next(r for r in resources if r["name"] == "bob")
    if bob["disabled"]:  # an earlier test disabled it
        enabled = admin.patch(
            f"/providers/{provider}/resources/{bob['id']}",
            json={"disabled": False},
            headers={"if-match": str(bob["version"])},
        )
        assert enabled.status_code == 200, enabled.text
    codex.resets_at = time.time() + 600
    codex.used_by[ALICE[0]] = 100
    try:

        def refused() -> openai.APIStatusError | None:
            try:
                client.responses.create(model="codex", input="x", prompt_cache_key="resting")
            except openai.APIStatusError as error:
                body = error.response.text
                # until the gateway has read the sign-out, bob still answers for alice
                return error if "no ChatGPT account" in body else None
            return None

        error = until(refused, "both accounts unavailable")
        assert error.status_code == 503 and error.code == "account_unavailable"
        assert 500 < int(error.response.headers["retry-after"]) <= 600, error.response.text
    finally:
        codex.used_by[ALICE[0]] = 10
        codex.signing_in(*BOB)
        admin_sign_in(admin, codex, "bob")
