"""Running real coding agents and agent SDKs non-interactively, each against one endpoint.

Every run gets its own HOME (a fresh folder), its own working directory, a clean environment
(PATH, HOME, a UTF-8 locale and the client's own variables: nothing of the caller's, so no real
key or config leaks in) and a timeout; it returns the exit code, stdout and stderr. Each client
is kept from calling home: telemetry, update checks, model catalogues and plugin downloads are
turned off by its own variables and settings files (see each `_invoke_*`), because the machine
reaches no network but the package registries, and a test must not depend on one.

The node clients are those pinned in tests/agents/package.json (`make agents` installs them
into tests/agents/node_modules); the Python SDKs run tests/agents/sdk_agents.py with this
interpreter (openai-agents and pydantic-ai are in the dev extra).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from tests.support import zygote
from tests.support.services import REQUIRE_AGENTS, skipped_services

AGENTS_DIR: Final = Path(__file__).resolve().parent.parent / "agents"
BIN: Final = AGENTS_DIR / "node_modules" / ".bin"
SDK_SCRIPT: Final = AGENTS_DIR / "sdk_agents.py"


@dataclass(frozen=True)
class Endpoint:
    """Where a client sends its requests: the root URL of the server (the gateway or the
    agent upstream: each client adds its own API prefix), the key it presents, the model."""

    root_url: str
    key: str
    model: str


@dataclass(frozen=True)
class Invocation:
    argv: list[str]
    env: dict[str, str]
    #: Files to write before the run, relative to HOME (settings, config).
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentRun:
    client: str
    exit_code: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        """Everything a failed assertion should show."""
        return (
            f"{self.client} exit {self.exit_code} after {self.seconds:.1f}s\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


@dataclass(frozen=True)
class Client:
    """One agent: its name, the wire protocol it speaks, how to invoke it, what it needs
    installed."""

    name: str
    protocol: str  # anthropic | openai_responses | openai_chat | gemini
    #: (endpoint, prompt, HOME, continued): `continued` asks the client to go on with the
    #: last conversation it had in that HOME instead of starting a new one.
    invoke: Callable[[Endpoint, str, Path, bool], Invocation]
    #: The executable (node clients) or the Python module (SDKs) that must be there.
    needs: str
    streams: bool = True

    def available(self) -> bool:
        if self.needs.startswith("py:"):
            import importlib.util

            return importlib.util.find_spec(self.needs[3:]) is not None
        return (BIN / self.needs).exists()


def need(client: Client) -> None:
    """Skip the test (with the loud notice at the end of the run) when `client` is not
    installed; fail it instead under LLMRELAY_TEST_REQUIRE_AGENTS=1 (.ci/run)."""
    if client.available():
        return
    how = "`make agents`" if not client.needs.startswith("py:") else "the dev extra"
    missing = f"the coding agent {client.name} ({how})"
    if REQUIRE_AGENTS:
        pytest.fail(f"{missing} is not installed (LLMRELAY_TEST_REQUIRE_AGENTS=1)")
    skipped_services.add(missing)
    pytest.skip(f"{missing} is not installed")


def run(
    client: Client,
    endpoint: Endpoint,
    prompt: str,
    home: Path,
    timeout_s: float = 120,
    *,
    continued: bool = False,
) -> AgentRun:
    """Run `client` once on `prompt`; HOME is `home` (created), the working directory
    `home/work`. `continued`: the prompt goes on with the conversation of the client's last
    run in the same `home` (its own resume option, or the history the SDK agents keep)."""
    home.mkdir(parents=True, exist_ok=True)
    workdir = home / "work"
    workdir.mkdir(exist_ok=True)
    (home / "tmp").mkdir(exist_ok=True)
    invocation = client.invoke(endpoint, prompt, home, continued)
    for relative, text in invocation.files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = {**base_env(home), **invocation.env}
    started = time.monotonic()
    if invocation.argv[:2] == [sys.executable, str(SDK_SCRIPT)] and not zygote.disabled(env):
        code, out, err = _run_forked(invocation.argv, env, workdir, timeout_s)
    else:
        code, out, err = _run_process(invocation.argv, env, workdir, timeout_s)
    return AgentRun(
        client.name,
        code,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        time.monotonic() - started,
    )


def _run_process(
    argv: list[str], env: dict[str, str], workdir: Path, timeout_s: float
) -> tuple[int | None, bytes, bytes]:
    with subprocess.Popen(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its children (the shell commands it runs) go with it
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout_s)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            out, err = process.communicate()
            code = None
        _kill_group(process.pid)  # whatever it left running in the background
    return code, out, err


def _run_forked(
    argv: list[str], env: dict[str, str], workdir: Path, timeout_s: float
) -> tuple[int | None, bytes, bytes]:
    """An SDK run forked from the test process's `agents` zygote (tests/support/zygote.py),
    which imported the SDKs once, in a clean environment of its own: 3-3.5 s of CPU less a
    run. Its own session as `_run_process`'s; its output through files beside its HOME."""
    forked = zygote.the_zygote("agents", _zygote_environ())
    out = workdir.parent / f"run-{time.monotonic_ns()}.out"
    err = out.with_suffix(".err")
    child = forked.spawn(argv, env, workdir, (str(out), str(err)), session=True)
    try:
        code: int | None = child.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(child.pid)
        child.wait()
        code = None
    _kill_group(child.pid)  # whatever it left running in the background
    return code, out.read_bytes(), err.read_bytes()


def _zygote_environ() -> dict[str, str]:
    """The SDKs' zygote imports them as a run would: in a clean environment, HOME a folder of
    its own."""
    home = Path(tempfile.mkdtemp(prefix="agents-zygote-"))
    (home / "tmp").mkdir()
    atexit.register(shutil.rmtree, home, True)
    return {**base_env(home), "PYTHONDONTWRITEBYTECODE": "1"}


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # none left
        os.killpg(group, signal.SIGKILL)


def base_env(home: Path) -> dict[str, str]:
    node = shutil.which("node")
    path = [str(Path(node).parent)] if node else []
    path += [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    return {
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
        "TMPDIR": str(home / "tmp"),
    }


def _invoke_claude_code(endpoint: Endpoint, prompt: str, home: Path, continued: bool) -> Invocation:
    model = endpoint.model
    env = {
        "ANTHROPIC_BASE_URL": endpoint.root_url,
        "ANTHROPIC_AUTH_TOKEN": endpoint.key,
        # Every model it picks on its own (side requests, sub-agents) is the one we serve.
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
    }
    argv = [str(BIN / "claude"), "-p", prompt, "--model", model, "--allowedTools", "Bash"]
    if continued:
        argv.append("--continue")  # the last conversation in this working directory
    return Invocation(argv, env)


def _invoke_codex(endpoint: Endpoint, prompt: str, home: Path, continued: bool) -> Invocation:
    codex_home = home / ".codex"
    config = f"""\
model = "{endpoint.model}"
model_provider = "relay"
check_for_update_on_startup = false

[model_providers.relay]
name = "llmrelay"
base_url = "{endpoint.root_url}/v1"
env_key = "RELAY_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

# The curated plugin marketplace is synced from GitHub at every start.
[features]
plugins = false
remote_plugin = false

[feedback]
enabled = false
"""
    argv = [
        str(BIN / "codex"),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--color",
        "never",
        "-m",
        endpoint.model,
        *(["resume", "--last"] if continued else []),  # the newest recorded session
        prompt,
    ]
    env = {"CODEX_HOME": str(codex_home), "RELAY_API_KEY": endpoint.key}
    return Invocation(argv, env, {".codex/config.toml": config})


def _invoke_gemini_cli(endpoint: Endpoint, prompt: str, home: Path, continued: bool) -> Invocation:
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "ide": {"enabled": False},
    }
    env = {
        "GEMINI_API_KEY": endpoint.key,
        "GOOGLE_GEMINI_BASE_URL": endpoint.root_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_MODEL": endpoint.model,
    }
    argv = [str(BIN / "gemini"), "-p", prompt, "-m", endpoint.model, "--yolo", "-o", "text"]
    if continued:
        argv += ["--resume", "latest"]  # the newest session of this project
    return Invocation(argv, env, {".gemini/settings.json": json.dumps(settings, indent=2)})


def _invoke_opencode(endpoint: Endpoint, prompt: str, home: Path, continued: bool) -> Invocation:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"relay/{endpoint.model}",
        "small_model": f"relay/{endpoint.model}",
        "provider": {
            "relay": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "llmrelay",
                "options": {"baseURL": f"{endpoint.root_url}/v1", "apiKey": endpoint.key},
                "models": {endpoint.model: {"name": endpoint.model, "tool_call": True}},
            }
        },
    }
    env = {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_PERMISSION": json.dumps({"bash": "allow", "edit": "allow"}),
    }
    argv = [str(BIN / "opencode"), "run", "--model", f"relay/{endpoint.model}"]
    argv += ["--continue", prompt] if continued else [prompt]  # --continue: the last session
    # opencode installs its plugin SDK (@opencode-ai/plugin) into every config folder from
    # the npm registry, in the background, unless the folder has node_modules and a lock
    # naming it: those two keep it from downloading anything.
    lock = {"packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
    files = {
        ".config/opencode/opencode.json": json.dumps(config, indent=2),
        ".config/opencode/package-lock.json": json.dumps(lock),
        ".config/opencode/node_modules/.keep": "",
    }
    return Invocation(argv, env, files)


def _invoke_qwen_code(endpoint: Endpoint, prompt: str, home: Path, continued: bool) -> Invocation:
    settings = {
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "ide": {"enabled": False},
    }
    env = {
        "OPENAI_BASE_URL": f"{endpoint.root_url}/v1",
        "OPENAI_API_KEY": endpoint.key,
        "OPENAI_MODEL": endpoint.model,
    }
    argv = [str(BIN / "qwen"), "-p", prompt, "--yolo", "-m", endpoint.model]
    if continued:
        argv.append("--continue")  # the most recent session of this project
    return Invocation(argv, env, {".qwen/settings.json": json.dumps(settings, indent=2)})


def _sdk(flavour: str) -> Callable[[Endpoint, str, Path, bool], Invocation]:
    def invoke(endpoint: Endpoint, prompt: str, home: Path, continued: bool) -> Invocation:
        env = {
            "OPENAI_BASE_URL": f"{endpoint.root_url}/v1",
            "OPENAI_API_KEY": endpoint.key,
            "AGENT_MODEL": endpoint.model,
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        # Each run keeps its conversation in HOME; a continued run starts from it.
        history = str(home / "history.json")
        argv = [sys.executable, str(SDK_SCRIPT), flavour, prompt, history]
        return Invocation(argv + (["--continue"] if continued else []), env)

    return invoke


CLAUDE_CODE: Final = Client("claude-code", "anthropic", _invoke_claude_code, "claude")
CODEX: Final = Client("codex", "openai_responses", _invoke_codex, "codex")
GEMINI_CLI: Final = Client("gemini-cli", "gemini", _invoke_gemini_cli, "gemini")
OPENCODE: Final = Client("opencode", "openai_chat", _invoke_opencode, "opencode")
QWEN_CODE: Final = Client("qwen-code", "openai_chat", _invoke_qwen_code, "qwen")
AGENTS_SDK_RESPONSES: Final = Client(
    "agents-sdk-responses", "openai_responses", _sdk("agents-responses"), "py:agents"
)
AGENTS_SDK_CHAT: Final = Client("agents-sdk-chat", "openai_chat", _sdk("agents-chat"), "py:agents")
PYDANTIC_AI: Final = Client("pydantic-ai", "openai_chat", _sdk("pydantic-ai"), "py:pydantic_ai")

CLIENTS: Final = {
    c.name: c
    for c in (
        CLAUDE_CODE,
        CODEX,
        GEMINI_CLI,
        OPENCODE,
        QWEN_CODE,
        AGENTS_SDK_RESPONSES,
        AGENTS_SDK_CHAT,
        PYDANTIC_AI,
    )
}
