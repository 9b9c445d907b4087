"""Sticky routing through a real gateway process and the mock upstream: the turns of one
conversation stay on the route that served its first turn (named by an agent's session
header, its `prompt_cache_key`, or the key and its first turn), other conversations spread
by the strategy, and a binding moves only when its route fails or its breaker is open."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess, serving
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-sticky-key-0123456789"
SYSTEM = "You are a coding agent. Answer with the tool results."


def sticky_config(upstream: MockUpstream) -> str:
    def provider(kind: str, n: int) -> str:
        url = upstream.root_url if kind == "anthropic" else upstream.base_url
        return f"""
  - slug: {kind}-{n}
    type: {kind}
    base_url: {url}
    api_key: sk-upstream-{kind}-{n}"""

    def model(name: str, kind: str, extra: str = "") -> str:
        """Two routes weighted 1:1: without stickiness, turns spread over both."""
        return f"""
  - name: {name}
    strategy: weighted{extra}
    routes:
      - {{provider: {kind}-1, upstream_model: {name}-1}}
      - {{provider: {kind}-2, upstream_model: {name}-2}}"""

    off = "\n    affinity: {enabled: false}"
    return (
        "providers:"
        + "".join(provider(k, n) for k in ("anthropic", "openai_compatible") for n in (1, 2))
        + "\nrouting:\n  breaker: {failures: 1, cooldown_s: 1, max_cooldown_s: 1}\nmodels:"
        + model("claude", "anthropic")
        + model("chat", "openai_compatible")
        + model("codex", "openai_compatible")
        + model("chat-off", "openai_compatible", off)
        + model("moving", "openai_compatible")
        + f"\nprojects:\n  - name: sticky\n    keys: [{{name: k, key: {KEY}}}]\n"
    )


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("sticky"), sticky_config(upstream))


@pytest.fixture
def http(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    headers = {"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as client:
        yield client


def _messages_turns(first: str, turns: int) -> Iterator[dict[str, Any]]:
    """The bodies of a Claude Code-like conversation, growing by a turn each time, with the
    cache mark on the newest user message."""
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        text = first if turn == 0 else f"and step {turn}"
        if history:
            history[-1]["content"][0].pop("cache_control", None)
        history.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
            }
        )
        yield {
            "model": "claude",
            "max_tokens": 64,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": history,
        }
        history.append({"role": "assistant", "content": [{"type": "text", "text": text}]})


def _chat_turns(model: str, first: str, turns: int) -> Iterator[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": first},
    ]
    for turn in range(turns):
        yield {"model": model, "messages": list(messages)}
        messages += [
            {"role": "assistant", "content": f"answer {turn}"},
            {"role": "user", "content": f"and step {turn + 1}"},
        ]


def _served(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.headers["x-llmrelay-provider"]


def test_claude_codes_session_header_keeps_every_turn_on_one_provider(
    http: httpx.Client, upstream: MockUpstream
) -> None:
    seen = set()
    for n in range(16):
        session = {"x-claude-code-session-id": f"cc-session-{n}"}
        served = {
            _served(http.post("/v1/messages", json=body, headers=session))
            for body in _messages_turns("list the files", 4)
        }
        assert len(served) == 1, served
        seen |= served
    assert seen == {"anthropic-1", "anthropic-2"}  # same prompt, other sessions: spread
    last = [r for r in upstream.requests if r.path == "/v1/messages"][-1]
    assert last.body["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert last.body["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_a_streamed_conversation_without_a_header_sticks_by_its_first_turn(
    http: httpx.Client,
) -> None:
    seen = set()
    for n in range(16):
        served = set()
        for body in _messages_turns(f"conversation {n}: read the README", 4):
            with http.stream("POST", "/v1/messages", json={**body, "stream": True}) as streamed:
                streamed.read()
                assert b"message_stop" in streamed.content
                served.add(_served(streamed))
        assert len(served) == 1, served
        seen |= served
    assert seen == {"anthropic-1", "anthropic-2"}


def test_chat_turns_stick_by_key_and_first_turn_and_codex_by_its_session(
    http: httpx.Client, upstream: MockUpstream
) -> None:
    seen: set[str] = set()
    for n in range(16):
        served = {
            _served(http.post("/v1/chat/completions", json=body))
            for body in _chat_turns("chat", f"task {n}", 4)
        }
        assert len(served) == 1, served
        seen |= served
    assert seen == {"openai_compatible-1", "openai_compatible-2"}

    seen = set()
    for n in range(16):  # Codex: Responses with its session header, or its prompt_cache_key
        served = set()
        header = {"session-id": f"codex-session-{n}"} if n % 2 else {}
        for turn in range(4):
            body = {
                "model": "codex",
                "instructions": SYSTEM,
                "input": [{"role": "user", "content": f"turn {turn}"}],  # no common turn
                "prompt_cache_key": f"codex-{n}",
                "store": False,
            }
            served.add(_served(http.post("/v1/responses", json=body, headers=header)))
        assert len(served) == 1, served
        seen |= served
    assert seen == {"openai_compatible-1", "openai_compatible-2"}
    last = upstream.chat_requests()[-1]
    assert last.body["prompt_cache_key"] == "codex-15"  # kept to an OpenAI-style upstream


def test_a_model_with_affinity_off_spreads_one_conversations_turns(http: httpx.Client) -> None:
    session = {"x-claude-code-session-id": "off-session"}
    served = {
        _served(http.post("/v1/chat/completions", json=body, headers=session))
        for body in _chat_turns("chat-off", "one task", 30)
    }
    assert served == {"openai_compatible-1", "openai_compatible-2"}  # 2^-29 to fail


def test_a_binding_moves_only_when_its_route_fails_then_stays(
    http: httpx.Client, upstream: MockUpstream, gateway: GatewayProcess
) -> None:
    session = {"x-claude-code-session-id": "moving-session"}
    turns = _chat_turns("moving", "fix the bug", 12)

    def turn() -> str:
        return _served(http.post("/v1/chat/completions", json=next(turns), headers=session))

    first = turn()
    assert {turn() for _ in range(2)} == {first}
    number = first.rsplit("-", 1)[1]
    other = "openai_compatible-" + ("2" if number == "1" else "1")
    upstream.down.add(f"moving-{number}")  # the bound route fails: its breaker opens
    try:
        assert turn() == other  # failed over: the binding moves with it
        assert turn() == other
    finally:
        upstream.down.discard(f"moving-{number}")
    _wait_for_closed_breakers(gateway)  # its trial call found it healthy again
    assert {turn() for _ in range(4)} == {other}  # healthy again, but the binding moved


def _wait_for_closed_breakers(gateway: GatewayProcess, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = httpx.get(f"{gateway.url}/metrics", timeout=5).text
        states = [line for line in metrics.splitlines() if line.startswith("llmrelay_breaker_")]
        states = [line for line in states if line.startswith("llmrelay_breaker_state{")]
        if states and all(line.endswith(" 0.0") for line in states):
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.05)
