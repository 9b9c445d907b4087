"""Start, reload, and graceful shutdown of a real `llmrelay serve` process."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import openai

from tests.support.closing import Closing
from tests.support.gateway_process import GatewayProcess
from tests.support.mock_upstream import MockUpstream
from tests.support.zygote import run_llmrelay

KEY = "lifecycle-key-0123456789"


def _config(upstream: MockUpstream, extra_keys: str = "") -> str:
    return f"""
providers:
  - {{slug: up, type: openai_compatible, base_url: {upstream.base_url}}}
models:
  - name: chat
    routes: [{{provider: up, upstream_model: echo}}]
  - name: slow-stream
    routes: [{{provider: up, upstream_model: slow-1}}]
  - name: paced
    routes: [{{provider: up, upstream_model: paced-50}}]
projects:
  - name: p
    keys:
      - {{name: k, key: {KEY}}}
{extra_keys}"""


def test_health_endpoints(tmp_path: Path, upstream: MockUpstream) -> None:
    process = GatewayProcess(tmp_path, config=_config(upstream)).start()
    try:
        assert httpx.get(f"{process.url}/livez").status_code == 200
        ready = httpx.get(f"{process.url}/readyz")
        assert ready.status_code == 200
        assert ready.json()["database"] == "ok" and ready.json()["snapshot"] == "loaded"
        assert httpx.get(f"{process.url}/healthz").status_code == 200
        assert "llmrelay_snapshot_generation 1.0" in httpx.get(f"{process.url}/metrics").text
    finally:
        assert process.stop() == 0


def test_apply_from_another_process_reaches_the_running_gateway(
    tmp_path: Path,
    upstream: MockUpstream,
    closing: Closing,
) -> None:
    process = GatewayProcess(tmp_path, config=_config(upstream)).start()
    try:
        new_key = "lifecycle-new-key-0123456789"
        config = tmp_path / "more.yaml"
        config.write_text(_config(upstream, f"      - {{name: k2, key: {new_key}}}\n"))
        applied = run_llmrelay(
            ["apply", str(config)],
            env=process.env,
        )
        assert applied.returncode == 0, applied.stderr
        assert "created key p/k2" in applied.stdout
        client = closing(openai.OpenAI(api_key=new_key, base_url=process.base_url, max_retries=0))
        deadline = time.monotonic() + 5
        while True:
            try:
                reply = client.chat.completions.create(
                    model="chat", messages=[{"role": "user", "content": "hey"}]
                )
                break
            except openai.AuthenticationError:
                assert time.monotonic() < deadline, "the new key never reached the gateway"
                time.sleep(0.1)
        assert reply.choices[0].message.content == "hey"
    finally:
        assert process.stop() == 0


def test_sigterm_lets_a_running_stream_finish_flushes_records_and_exits_0(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    process = GatewayProcess(tmp_path, config=_config(upstream)).start()
    words = " ".join(f"w{i}" for i in range(60))  # the upstream sends one word per 50 ms
    result: dict[str, object] = {}
    running = threading.Event()

    def stream() -> None:
        with httpx.stream(
            "POST",
            f"{process.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "drain-stream"},
            json={
                "model": "paced",
                "stream": True,
                "messages": [{"role": "user", "content": words}],
            },
            timeout=60,
        ) as response:
            chunks = response.iter_bytes()
            body = next(chunks)
            running.set()
            result["body"] = body + b"".join(chunks)

    reader = threading.Thread(target=stream)
    reader.start()
    assert running.wait(60), "the stream never began"
    assert process.process is not None
    process.process.terminate()
    reader.join(60)
    body = result["body"]
    assert isinstance(body, bytes) and body.endswith(b"data: [DONE]\n\n")
    assert process.stop() == 0
    rows = process.records(["drain-stream"], timeout_s=0)
    assert rows["drain-stream"]["status_code"] == 200


def test_cli_apply_reports_invalid_config_with_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  - name: m\n    routes: [{provider: ghost, upstream_model: x}]\n")
    result = run_llmrelay(
        ["apply", str(bad)],
        env={"LLMRELAY_DATABASE_URL": f"sqlite:///{tmp_path}/x.db", "PATH": ""},
    )
    assert result.returncode == 2
    assert f"{bad}: models[0].routes[0].provider: unknown provider 'ghost'" in result.stderr


def test_cli_apply_prints_a_generated_key_once(tmp_path: Path, upstream: MockUpstream) -> None:
    config = tmp_path / "gen.yaml"
    config.write_text(
        _config(upstream).replace(f"      - {{name: k, key: {KEY}}}", "      - {name: gen}")
    )
    env = {"LLMRELAY_DATABASE_URL": f"sqlite:///{tmp_path}/gen.db", "PATH": ""}
    first = run_llmrelay(
        ["apply", str(config)],
        env=env,
        check=True,
    )
    assert first.stdout.count("new API key for project 'p', key 'gen'") == 1
    second = run_llmrelay(
        ["apply", str(config)],
        env=env,
        check=True,
    )
    assert "no changes" in second.stdout and "new API key" not in second.stdout
