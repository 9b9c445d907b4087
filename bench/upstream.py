"""The mock upstream: nginx on core 0 answering fixed OpenAI completions and streams, and the
same answers in Anthropic's Messages format (for bench.translation)."""

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

TEXT = "Hello there, how are you today? I am a fixed benchmark answer."
#: The content deltas of a stream.
WORDS = ("Hello", " there", ",", " how", " are", " you", " today", "?")

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
                "content": TEXT,
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

#: The answer of /plain/v1/embeddings (bench.soak's embeddings requests).
EMBEDDINGS: dict[str, Any] = {
    "object": "list",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 0.125, 1.0]}],
    "model": "text-embedding-3-small",
    "usage": {"prompt_tokens": 8, "total_tokens": 8},
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
    usage = {"prompt_tokens": 21, "completion_tokens": 8, "total_tokens": 29}
    return [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk({"content": w}) for w in WORDS),
        _chunk({}, finish="stop"),
        _chunk({}, usage=usage),
        "data: [DONE]\n\n",
    ]


# The same answers from an Anthropic provider (POST /v1/messages): a Message, and the event
# stream of one (https://docs.anthropic.com/en/api/messages-streaming), with the usage
# fields the API reports today.
ANTHROPIC_MODEL = "claude-haiku-4-5-20251001"


def _anthropic_usage(output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": 21,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


MESSAGE: dict[str, Any] = {
    "id": "msg_bench0001",
    "type": "message",
    "role": "assistant",
    "model": ANTHROPIC_MODEL,
    "content": [{"type": "text", "text": TEXT}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": _anthropic_usage(15),
}


def _named(data: dict[str, Any]) -> str:
    return f"event: {data['type']}\ndata: {_compact(data)}\n\n"


def anthropic_sse_events() -> list[str]:
    """message_start, content_block_start, ping, 8 text deltas (the words of sse_events),
    content_block_stop, message_delta (end_turn and the output tokens), message_stop: 14
    events. Translated for a chat client they are sse_events' 12: role, 8 deltas, finish
    reason, usage, [DONE]."""
    start = {**MESSAGE, "id": "msg_bench0002", "content": [], "stop_reason": None}
    start["usage"] = _anthropic_usage(1)
    return [
        _named({"type": "message_start", "message": start}),
        _named(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
        'event: ping\ndata: {"type": "ping"}\n\n',  # spaced: as Anthropic writes it
        *(
            _named(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": w},
                }
            )
            for w in WORDS
        ),
        _named({"type": "content_block_stop", "index": 0}),
        _named(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(WORDS)},
            }
        ),
        _named({"type": "message_stop"}),
    ]


def streams(mode: str) -> bool:
    """Whether a mode asks for a stream: sse, sse-paced, sse-paced-8 (bench.routing),
    anthropic-sse (bench.translation)."""
    return "sse" in mode.split("-")


def answer_fragments(mode: str) -> list[str]:
    """What a correct chat answer of this mode carries, in this order, in compact JSON: the
    role, the text (each content delta of a stream), the finish reason and the token counts.
    The same whichever provider's format nginx answered in. Embeddings: the vector and the
    token count."""
    if mode == "embeddings":
        return ['"object":"embedding"', '"embedding":[0.25,-0.5,0.125,1.0]', '"prompt_tokens":8']
    pieces = WORDS if streams(mode) else (TEXT,)
    text = [f'"content":{json.dumps(piece)}' for piece in pieces]
    tokens = '"prompt_tokens":{},"completion_tokens":{}'.format(*tokens_of(mode))
    return ['"role":"assistant"', *text, '"finish_reason":"stop"', tokens]


def tokens_of(mode: str) -> tuple[int, int]:
    """The prompt and completion tokens every answer of this mode reports (the usage in
    COMPLETION and sse_events, and in the Anthropic answers)."""
    return (21, len(WORDS)) if streams(mode) else (21, 15)


def carries(body: bytes, fragments: Sequence[str]) -> bool:
    """Whether `body` has these fragments in this order (the Lua check of bench.load)."""
    at = 0
    for fragment in fragments:
        found = body.find(fragment.encode(), at)
        if found < 0:
            return False
        at = found + len(fragment.encode())
    return True


def answer_object(mode: str) -> str:
    """The `object` a whole (not streamed) answer of this mode names."""
    return "list" if mode == "embeddings" else "chat.completion"


def request_body(mode: str) -> str:
    if mode == "embeddings":
        return _compact({"model": "bench-embeddings", "input": "Say hello, in one vector."})
    body: dict[str, Any] = {
        "model": f"bench-{mode}",
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Say hello and ask how I am, in one short sentence."},
        ],
        "max_tokens": 32,
        "temperature": 0,
    }
    if streams(mode):
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
        location = /plain/v1/embeddings {{
            default_type application/json;
            return 200 {_nginx_string(_compact(EMBEDDINGS))};
        }}
        location = /sse/v1/chat/completions {{
            default_type "text/event-stream; charset=utf-8";
            return 200 {_nginx_string("".join(events))};
        }}
        location = /sse-paced/v1/chat/completions {{
            default_type "text/event-stream; charset=utf-8";
            {paced_body if "sse-paced" in self.modes else "return 404;"}
        }}
        # An anthropic provider's base URL is /anthropic-MODE (the adapter adds /v1/messages):
        # one location per mode, as nginx cannot answer by the body's "stream".
        location = /anthropic-plain/v1/messages {{
            default_type application/json;
            return 200 {_nginx_string(_compact(MESSAGE))};
        }}
        location = /anthropic-sse/v1/messages {{
            default_type "text/event-stream; charset=utf-8";
            return 200 {_nginx_string("".join(anthropic_sse_events()))};
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
