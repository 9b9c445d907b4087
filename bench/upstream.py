"""The mock upstream: nginx on core 0 answering fixed OpenAI completions and streams."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.constants import ECHO_MODULE, LOADGEN_CORE, PACED_PAUSE_S
from bench.procs import free_port, process_tree, stop_process

# -- the mock upstream's answers --------------------------------------------------------

COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-bench0001",
    "object": "chat.completion",
    "created": 1730000000,
    "model": "gpt-4o-mini-2024-07-18",
    "system_fingerprint": "fp_bench",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello there, how are you today? I am a fixed benchmark answer.",
                "refusal": None,
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 21,
        "completion_tokens": 15,
        "total_tokens": 36,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    },
}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> str:
    body: dict[str, Any] = {
        "id": "chatcmpl-bench0002",
        "object": "chat.completion.chunk",
        "created": 1730000000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_bench",
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = usage
    return "data: " + _compact(body) + "\n\n"


def sse_events() -> list[str]:
    """Role, 8 content deltas, finish reason, usage, [DONE]: 12 events."""
    words = ["Hello", " there", ",", " how", " are", " you", " today", "?"]
    usage = {"prompt_tokens": 21, "completion_tokens": 8, "total_tokens": 29}
    return [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk({"content": w}) for w in words),
        _chunk({}, finish="stop"),
        _chunk({}, usage=usage),
        "data: [DONE]\n\n",
    ]


def request_body(mode: str) -> str:
    body: dict[str, Any] = {
        "model": f"bench-{mode}",
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Say hello and ask how I am, in one short sentence."},
        ],
        "max_tokens": 32,
        "temperature": 0,
    }
    if mode.startswith("sse"):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return _compact(body)


def _nginx_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Nginx:
    def __init__(self, folder: Path, modes: Sequence[str]) -> None:
        self.folder = folder / "nginx"
        self.modes = modes
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        prefix = self.folder
        head = [f"load_module {ECHO_MODULE};"] if "sse-paced" in self.modes else []
        if os.geteuid() == 0:  # root's workers would run as nobody, away from the temp folder
            head.append(f"user {pwd.getpwuid(0).pw_name};")
        temps = "\n".join(
            f"    {name}_temp_path {prefix}/tmp/{name};"
            for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        events = sse_events()
        paced = []
        for index, event in enumerate(events):
            paced.append(f"echo -n {_nginx_string(event)};")
            paced.append("echo_flush;")
            if index == 1:  # after the first content event: "time to first token" then the rest
                paced.append(f"echo_sleep {PACED_PAUSE_S};")
        paced_body = "\n            ".join(paced)
        return f"""
{chr(10).join(head)}
daemon off;
master_process on;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
http {{
    access_log off;
{temps}
    keepalive_timeout 300s;
    keepalive_requests 10000000;
    client_body_buffer_size 64k;
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        location = /plain/v1/chat/completions {{
            default_type application/json;
            return 200 {_nginx_string(_compact(COMPLETION))};
        }}
        location = /sse/v1/chat/completions {{
            default_type "text/event-stream; charset=utf-8";
            return 200 {_nginx_string("".join(events))};
        }}
        location = /sse-paced/v1/chat/completions {{
            default_type "text/event-stream; charset=utf-8";
            {paced_body if "sse-paced" in self.modes else "return 404;"}
        }}
        location / {{ return 404; }}
    }}
}}
"""

    def start(self) -> None:
        (self.folder / "tmp").mkdir(parents=True)
        conf = self.folder / "nginx.conf"
        conf.write_text(self.config())
        error_log = self.folder / "error.log"
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        command = ["taskset", "-c", LOADGEN_CORE, nginx, "-p", str(self.folder), "-c", str(conf)]
        self.process = subprocess.Popen(
            [*command, "-e", str(error_log)],
            stdout=(self.folder / "stdout.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.process.poll() is None:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return
            time.sleep(0.02)
        raise RuntimeError(f"nginx did not start: {error_log.read_text()}")

    def pids(self) -> list[int]:
        assert self.process is not None
        return process_tree(self.process.pid)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, signal.SIGQUIT)


@contextlib.contextmanager
def upstream(folder: Path, modes: Sequence[str]) -> Iterator[Nginx]:
    nginx = Nginx(folder, modes)
    nginx.start()
    try:
        yield nginx
    finally:
        nginx.stop()
