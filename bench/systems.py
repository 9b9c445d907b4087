"""The systems under test (the bare proxy and llmrelay) on core 1: start, check, stop."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench.constants import (
    BARE_PROXY,
    BENCH_KEY,
    COLD_STARTS,
    KEY_LIMITED_KEY,
    LIMITED_KEY,
    SUT_CORE,
)
from bench.procs import (
    free_port,
    http_get,
    http_post,
    memory_kb,
    process_tree,
    stop_process,
    venv_program,
    wait_for_quiet_core,
)
from bench.upstream import answer_fragments, carries, request_body, sse_events, streams

#: The arms of bench.translation: per mode a model bench-API-MODE for each API, whose route
#: leads to a provider of this type (and upstream model) on nginx's location for that API.
TRANSLATION_ARMS = ("openai", "anthropic")
#: The arms of bench.limits: the same model and route, called with a key without limits,
#: with LIMITED_KEY ("all") and with KEY_LIMITED_KEY ("key").
LIMIT_ARMS = ("off", "all", "key")
_ARM_KEYS = {"all": LIMITED_KEY, "key": KEY_LIMITED_KEY}
#: LIMITED_KEY's limits: every kind on the key and on its project, far above what a run
#: can reach, so every request is admitted and settled but none refused.
_LIMITS = "{rpm: 100000000, tpm: 2000000000, concurrency: 100000}"
_API_PROVIDERS = {
    "openai": ("openai_compatible", "gpt-4o-mini"),
    "anthropic": ("anthropic", "claude-haiku-4-5"),
}


@dataclass
class System:
    """One server on core 1 and how to call it."""

    name: str
    port: int
    paths: dict[str, str]  # mode -> request path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    cold_start_s: list[float] = field(default_factory=list)  # fresh database
    restart_s: list[float] = field(default_factory=list)  # database already there
    requests_total: int = 0
    rss_checkpoints: dict[str, int] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # mode -> what the check found
    keys: dict[str, str] = field(default_factory=dict)  # mode -> key, when not BENCH_KEY

    def pids(self) -> list[int]:
        assert self.process is not None
        return process_tree(self.process.pid)

    def rss_kb(self) -> int:
        return memory_kb(self.pids(), "VmRSS")

    def peak_rss_kb(self) -> int:
        return memory_kb(self.pids(), "VmHWM")

    def launch(
        self, command: list[str], env: dict[str, str], cwd: Path, ready: str, restart: bool = False
    ) -> None:
        """Start on core 1; cold start = until GET `ready` answers 200 (or, for "POST", until
        a real chat request does: the bare proxy has no probe)."""
        wait_for_quiet_core()
        started = time.monotonic()
        self.process = subprocess.Popen(
            ["taskset", "-c", SUT_CORE, *command],
            env=env,
            cwd=cwd,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
        )
        while time.monotonic() - started < READY_S:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(OSError, http.client.HTTPException):
                if ready == "POST":
                    status = http_post(self.port, self.paths["plain"], request_body("plain"))[0]
                else:
                    status = http_get(self.port, ready, timeout_s=1.0)
                if status == 200:
                    took = time.monotonic() - started
                    (self.restart_s if restart else self.cold_start_s).append(round(took, 3))
                    return
            time.sleep(0.005)
        self.stop()
        raise RuntimeError(f"{self.name} did not get ready:\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None


def routed_mode(mode: str, routes: int) -> str:
    """The label of a mode called through the `least_time` model with `routes` routes
    (bench.routing): "plain-8" asks for model bench-plain-8 on the plain location."""
    return f"{mode}-{routes}"


def translated_mode(mode: str, api: str) -> str:
    """The label of a mode called through model bench-API-MODE (bench.translation):
    "anthropic-sse" asks for a stream from the anthropic provider on /anthropic-sse/."""
    return f"{api}-{mode}"


def limited_mode(mode: str, arm: str) -> str:
    """The label of a mode called through model bench-ARM-MODE (bench.limits): "all-plain"
    asks with LIMITED_KEY for the plain location."""
    return f"{arm}-{mode}"


def _provider(slug: str, upstream_port: int, mode: str, kind: str = "openai_compatible") -> str:
    # An anthropic provider's base URL is the host root: the adapter adds /v1/messages.
    path = f"anthropic-{mode}" if kind == "anthropic" else f"{mode}/v1"
    return (
        f"  - slug: {slug}\n"
        f"    type: {kind}\n"
        f"    base_url: http://127.0.0.1:{upstream_port}/{path}\n"
        "    api_key: sk-upstream-bench-not-a-secret\n"
        "    timeout_s: 30\n"
    )


def _model(
    name: str,
    slugs: Sequence[str],
    strategy: str | None = None,
    upstream_model: str = "gpt-4o-mini",
) -> str:
    routes = "".join(
        f"      - provider: {slug}\n        upstream_model: {upstream_model}\n" for slug in slugs
    )
    return (
        f"  - name: {name}\n"
        + (f"    strategy: {strategy}\n" if strategy else "")
        + "    routes:\n"
        + routes
        + "    pricing: {input_per_mtok: 0.15, output_per_mtok: 0.60}\n"
    )


def llmrelay_config(
    upstream_port: int,
    modes: Sequence[str],
    routed: Sequence[int] = (),
    translated: Sequence[str] = (),
    limited: Sequence[str] = (),
) -> str:
    """Per mode a provider mock-MODE and a one-route model bench-MODE. For each n in
    `routed` also a `least_time` model bench-MODE-n whose n routes lead to providers
    mock-MODE-r0, r1, ... : distinct providers (so distinct routes) on the same location.
    For each mode in `translated`, per API of TRANSLATION_ARMS a one-route model
    bench-API-MODE to its own provider mock-API-MODE. For each mode in `limited`, per arm
    of LIMIT_ARMS a model bench-ARM-MODE to provider mock-MODE, and the projects of the
    limited keys."""
    providers, models = [], []
    for mode in translated:
        for api in TRANSLATION_ARMS:
            kind, upstream_model = _API_PROVIDERS[api]
            label = translated_mode(mode, api)
            providers.append(_provider(f"mock-{label}", upstream_port, mode, kind))
            models.append(_model(f"bench-{label}", [f"mock-{label}"], None, upstream_model))
    most = max(routed, default=0)
    for mode in modes:
        if mode == "embeddings":  # nginx answers embeddings on the plain location
            providers.append(_provider("mock-embeddings", upstream_port, "plain"))
            models.append(
                _model("bench-embeddings", ["mock-embeddings"], None, "text-embedding-3-small")
                + "    embedding: true\n"
            )
            continue
        providers.append(_provider(f"mock-{mode}", upstream_port, mode))
        models.append(_model(f"bench-{mode}", [f"mock-{mode}"]))
        slugs = [f"mock-{mode}-r{i}" for i in range(most)]
        providers += [_provider(slug, upstream_port, mode) for slug in slugs]
        models += [_model(f"bench-{routed_mode(mode, n)}", slugs[:n], "least_time") for n in routed]
    for mode in limited:
        models += [
            _model(f"bench-{limited_mode(mode, arm)}", [f"mock-{mode}"]) for arm in LIMIT_ARMS
        ]
    project = (
        "  - name: limited\n"
        f"    limits: {_LIMITS}\n"
        "    monthly_budget_usd: 1000000000\n"
        "    keys:\n"
        "      - name: wrk\n"
        f"        key: {LIMITED_KEY}\n"
        f"        limits: {_LIMITS}\n"
        "        monthly_budget_usd: 1000000000\n"
        "  - name: key-limits\n"
        "    keys:\n"
        "      - name: wrk\n"
        f"        key: {KEY_LIMITED_KEY}\n"
        "        limits: {rpm: 100000000, tpm: 2000000000}\n"
    )
    return (
        "providers:\n" + "".join(providers) + "models:\n" + "".join(models) + "projects:\n"
        "  - name: bench\n"
        "    keys:\n"
        "      - name: wrk\n"
        f"        key: {BENCH_KEY}\n" + (project if limited else "")
    )


#: How long a start may take (BENCH_READY_S: more on a machine shared with other work).
READY_S: Final = float(os.environ.get("BENCH_READY_S", "60"))


def start_llmrelay(
    folder: Path,
    upstream_port: int,
    modes: Sequence[str],
    *,
    server: str = "uvicorn",
    routed: Sequence[int] = (),
    translated: Sequence[str] = (),
    limited: Sequence[str] = (),
    env: dict[str, str] | None = None,
    name: str | None = None,
) -> System:
    """uvicorn (as shipped): `llmrelay serve --config` on a fresh database (cold start with
    migrations and the config apply), stopped, then started again on it (restart).
    granian: the config applied with `llmrelay apply`, then the same app under granian.
    `routed`, `translated`: see llmrelay_config; their modes are callable as
    routed_mode(mode, n) and translated_mode(mode, api)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "llmrelay.yaml"
    config.write_text(llmrelay_config(upstream_port, modes, routed, translated, limited))
    port = free_port()
    name = name or ("llmrelay" if server == "uvicorn" else f"llmrelay-{server}")
    called = [*modes, *(routed_mode(m, n) for m in modes for n in routed)]
    called += [translated_mode(m, api) for m in translated for api in TRANSLATION_ARMS]
    called += [limited_mode(m, arm) for m in limited for arm in LIMIT_ARMS]
    paths = dict.fromkeys(called, "/v1/chat/completions")
    if "embeddings" in paths:
        paths["embeddings"] = "/v1/embeddings"
    system = System(name, port, paths, folder / f"{name}.log")
    system.keys = {limited_mode(m, arm): key for m in limited for arm, key in _ARM_KEYS.items()}
    env = {
        **os.environ,
        "LLMRELAY_DATABASE_URL": f"sqlite:///{folder / 'bench.db'}",
        **(env or {}),
    }
    if server == "uvicorn":
        command = [venv_program("llmrelay"), "serve", "--config", str(config), "--port", str(port)]
        for attempt in range(COLD_STARTS):  # each on a fresh database; the last one is kept
            database = "bench.db" if attempt == COLD_STARTS - 1 else f"cold-{attempt}.db"
            fresh = {**env, "LLMRELAY_DATABASE_URL": f"sqlite:///{folder / database}"}
            system.launch(command, fresh, folder, "/readyz")
            system.stop()
        system.launch(command, env, folder, "/readyz", restart=True)
    else:
        apply = [venv_program("llmrelay"), "apply", str(config)]
        subprocess.run(apply, env=env, cwd=folder, check=True, stdout=subprocess.DEVNULL)
        options = "--interface asgi --factory --loop uvloop --http 1 --no-ws --workers 1"
        options += " --runtime-threads 1 --log-level warning"
        command = [venv_program("granian"), *options.split(), "--port", str(port)]
        system.launch([*command, "llmrelay.app:app_from_env"], env, folder, "/readyz")
    return system


def start_bare(
    folder: Path, upstream_port: int, modes: Sequence[str], server: str, client: str
) -> System:
    port = free_port()
    name = f"bare-{server}-{client}"
    paths = {m: f"/{m}/v1/chat/completions" for m in modes}
    if "embeddings" in paths:
        paths["embeddings"] = "/plain/v1/embeddings"
    system = System(name, port, paths, folder / f"{name}.log")
    upstream = f"http://127.0.0.1:{upstream_port}"
    options = f"--server {server} --client {client} --upstream {upstream} --port {port}"
    command = [sys.executable, str(BARE_PROXY), *options.split()]
    system.launch(command, dict(os.environ), folder, "POST")
    return system


def check_answers(system: System, modes: Sequence[str]) -> None:
    """One request per mode before any load; what is wrong is kept in `system.problems`
    (the windows of that mode then count errors, and the report says so)."""
    for mode in modes:
        key = system.keys.get(mode, BENCH_KEY)
        status, body, content_type = http_post(
            system.port, system.paths[mode], request_body(mode), key
        )
        system.requests_total += 1
        problem = None
        if status != 200:
            problem = f"status {status}: {body[:300]!r}"
        elif mode == "embeddings":
            answer = json.loads(body)
            if answer.get("object") != "list" or not answer.get("data"):
                problem = f"not an embeddings list: {body[:300]!r}"
            elif system.name.startswith("llmrelay") and answer.get("model") != "bench-embeddings":
                problem = f"model not renamed: {answer.get('model')!r}"
        elif not streams(mode):  # plain, plain-N (bench.routing), API-plain (translation)
            answer = json.loads(body)
            if answer.get("object") != "chat.completion" or not answer.get("choices"):
                problem = f"not a chat.completion: {body[:300]!r}"
            elif system.name.startswith("llmrelay") and answer.get("model") != f"bench-{mode}":
                problem = f"model not renamed: {answer.get('model')!r}"
        elif "text/event-stream" not in content_type:
            problem = f"content-type {content_type!r}"
        elif not body.endswith(b"data: [DONE]\n\n") or b'"error":{' in body:
            problem = f"stream incomplete ({body.count(b'data: ')} events): {body[-240:]!r}"
        elif body.count(b"data: ") != len(sse_events()):
            problem = f"{body.count(b'data: ')} events, expected {len(sse_events())}"
        elif system.name.startswith("llmrelay"):
            models = {
                json.loads(line[6:]).get("model")
                for line in body.split(b"\n")
                if line.startswith(b"data: {")
            }
            if models != {f"bench-{mode}"}:
                problem = f"stream events name {sorted(map(str, models))}, not bench-{mode}"
        if problem is None and not carries(body, answer_fragments(mode)):
            wanted = " ... ".join(answer_fragments(mode))
            problem = f"the answer lacks, in this order, {wanted}: {body[:600]!r}"
        if problem:
            system.problems[mode] = problem
            print(f"  !! {system.name} {mode}: {problem}", flush=True)
