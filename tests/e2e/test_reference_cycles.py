"""A finished request leaves no reference cycle behind.

Objects in a cycle are freed only by the garbage collector, which then runs every few
requests and walks every young object: one stream relay holding its decoder while the
decoder held a method of the relay cost a translated stream about 20,000 instructions
(bench/instructions.py). Here a real gateway process (the CLI, started through a wrapper
that adds two signal handlers, nothing else) serves every kind of call, failures included;
then the collector keeps what it finds (gc.DEBUG_SAVEALL) and the wrapper writes the type
names down.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream

KEY = "e2e-cycles-key-0123456789"
LIMITED_KEY = "e2e-cycles-limited-0123456789"
SECRET = "sk-provider-secret-cycles"

#: `llmrelay serve`, with SIGUSR1 collecting and then keeping what later collections find,
#: and SIGUSR2 collecting once more and writing the kept objects' types to the report file.
_WRAPPER = """
import gc, json, os, signal, sys
from collections import Counter

def keep(signum, frame):
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)

def report(signum, frame):
    gc.collect()
    found = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    gc.set_debug(0)
    gc.garbage.clear()
    with open(os.environ["CYCLES_REPORT"], "w") as out:
        json.dump(found, out)

signal.signal(signal.SIGUSR1, keep)
signal.signal(signal.SIGUSR2, report)
sys.argv = ["llmrelay", *sys.argv[1:]]
from llmrelay.cli import main
main()
"""


def _config(upstream: MockUpstream) -> str:
    root = upstream.base_url.removesuffix("/v1")
    return f"""
providers:
  - {{slug: compat, type: openai_compatible, base_url: "{upstream.base_url}", api_key: {SECRET}}}
  - {{slug: claude, type: anthropic, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: google, type: gemini, base_url: "{root}", api_key: {SECRET}}}
  - {{slug: azure, type: azure_openai, base_url: "{root}", api_key: {SECRET},
      api_version: "2024-10-21"}}
models:
  - name: compat
    routes: [{{provider: compat, upstream_model: echo}}]
  - name: claude
    routes: [{{provider: claude, upstream_model: claude-test}}]
  - name: gemini
    routes: [{{provider: google, upstream_model: gemini-test}}]
  - name: azure
    routes: [{{provider: azure, upstream_model: my-deployment}}]
  - name: failing
    routes: [{{provider: compat, upstream_model: status-500}}]
  - name: failover
    routes:
      - {{provider: compat, upstream_model: status-500, priority: 0}}
      - {{provider: compat, upstream_model: echo, priority: 1}}
  - name: rejects
    routes: [{{provider: compat, upstream_model: status-400}}]
  - name: drop
    routes: [{{provider: compat, upstream_model: drop-after-2}}]
projects:
  - name: cycles
    keys:
      - {{name: k, key: {KEY}}}
      - {{name: limited, key: {LIMITED_KEY}, limits: {{rpm: 1}}}}
"""


@pytest.fixture(scope="module")
def gateway(
    upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("cycles")
    # The job runner is off: its idle reads build SQLAlchemy statements (whose cycles are
    # SQLAlchemy's, on a timer, not per request) that would blur what requests leave.
    env = {"CYCLES_REPORT": str(folder / "cycles.json"), "LLMRELAY_JOBS_IN_PROCESS": "false"}
    process = GatewayProcess(folder, config=_config(upstream), env=env)
    process.args[1:3] = ["-c", _WRAPPER]  # `python -m llmrelay serve ...` -> the wrapper
    process.start()
    yield process
    assert process.stop() == 0, process.logs()


def _every_kind_of_call(gateway: GatewayProcess) -> None:
    with (
        openai.OpenAI(api_key=KEY, base_url=gateway.base_url, max_retries=0, timeout=15) as chat,
        anthropic.Anthropic(api_key=KEY, base_url=gateway.url, max_retries=0, timeout=15) as mess,
    ):
        _calls(chat, mess)


def _calls(chat: openai.OpenAI, messages: anthropic.Anthropic) -> None:
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "one two three"}]
    for model in ("compat", "claude", "gemini", "azure"):
        answer = chat.chat.completions.create(model=model, messages=hello)
        assert answer.choices[0].message.content == "one two three"
        stream = chat.chat.completions.create(model=model, messages=hello, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    said: list[MessageParam] = [{"role": "user", "content": "one two three"}]
    for model in ("compat", "claude"):
        message = messages.messages.create(model=model, max_tokens=50, messages=said)
        assert message.content
        with messages.messages.stream(model=model, max_tokens=50, messages=said) as events:
            assert events.get_final_text()
    # Failures too: every route failing (502), a provider's rejection passed on (400), an
    # unknown model (404), a limit refusing (429), and a failover that ends well.
    for model in ("failing", "rejects", "nope"):
        with pytest.raises(openai.APIStatusError):
            chat.chat.completions.create(model=model, messages=hello)
    with openai.OpenAI(
        api_key=LIMITED_KEY, base_url=chat.base_url, max_retries=0, timeout=15
    ) as limited:
        # The minute's one request (refused as well when an earlier pass took it).
        with contextlib.suppress(openai.RateLimitError):
            limited.chat.completions.create(model="compat", messages=hello)
        with pytest.raises(openai.RateLimitError):
            limited.chat.completions.create(model="compat", messages=hello)
    assert chat.chat.completions.create(model="failover", messages=hello).choices
    with pytest.raises(openai.APIError):  # the provider drops the stream after two events
        list(chat.chat.completions.create(model="drop", messages=hello, stream=True))
    response = chat.responses.create(model="compat", input="one two three")
    assert response.output_text
    assert list(chat.responses.create(model="compat", input="one two three", stream=True))


def test_no_call_leaves_a_reference_cycle(gateway: GatewayProcess) -> None:
    assert gateway.process is not None
    _every_kind_of_call(gateway)  # warm-up: caches and lazy imports fill here
    report = gateway.folder / "cycles.json"
    gateway.process.send_signal(signal.SIGUSR1)
    time.sleep(0.5)
    _every_kind_of_call(gateway)
    _every_kind_of_call(gateway)
    time.sleep(0.5)  # the records' writer finishes its batch
    gateway.process.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while not report.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    found: dict[str, int] = json.loads(report.read_text())
    ours = {name: count for name, count in found.items() if name.startswith("llmrelay.")}
    assert ours == {}, f"left in cycles: {found}"
    assert sum(found.values()) < 50, f"left in cycles: {found}"
