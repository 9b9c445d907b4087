"""`python -m llmrelay ...` processes forked from a process that has already imported llmrelay.

A gateway process spends about 1.5-2 s of CPU importing llmrelay, its app and their
dependencies before it does anything of its own, and the suite starts some 250 of them: about
a tenth of the suite's CPU on two cores. Each test process (each pytest-xdist worker) keeps one
zygote: an interpreter that imported `llmrelay.cli`, `llmrelay.app` and what they import later
(the admin API, the console, the migrations: `_PRELOADED`) once and then forks a child per
start. The child sets the start's environment, working directory, umask and output
file, and runs `llmrelay`'s `__main__` as `python -m llmrelay` would; it then exits through the
interpreter's normal exit (atexit handlers, flushed files), as a new process does. One-shot
commands (`migrate`, `apply`...) go through `run_llmrelay`, the zygote's `subprocess.run`.

A second kind of zygote, `agents`, imports the Python agent SDKs in a clean environment of its
own and forks `python tests/agents/sdk_agents.py ...` runs (tests/support/agent_clients.py):
`python SCRIPT ...` as the interpreter would run it, in a session of its own if asked, its
stdout and stderr to files.

What a child cannot inherit, it does not get: a start whose interpreter would import
differently (another `PYTHON*` variable, `LLMRELAY_PURE_PYTHON`), or whose command is not
`python -m llmrelay ...`, is a plain `subprocess.Popen` (`popen_llmrelay`). So is every start
under `LLMRELAY_TEST_ZYGOTE=0`.

The zygote is not the test process's child's parent, so `ZygoteChild` offers the part of
`subprocess.Popen` the tests use (pid, poll, wait, send_signal, terminate, kill, returncode),
its exit code asked of the zygote, which reaps its children.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

_ZYGOTE_SCRIPT = Path(__file__).resolve()
#: Variables that change how an interpreter imports, read when it starts: a start that sets
#: any of them other than the zygote's own is not forked.
_IMPORT_VARIABLES = ("LLMRELAY_PURE_PYTHON",)


class ZygoteChild:
    """A process the zygote forked: what the tests use of `subprocess.Popen`."""

    def __init__(self, zygote: _Zygote, pid: int) -> None:
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["llmrelay"], timeout or 0.0)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: no signal to a process known to have exited
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Zygote:
    """The test process's side: requests over the zygote's stdin, answers on its stdout.
    `kind` names what it imports (`_PRELOADED`); `environ` is the environment it imports in."""

    def __init__(self, kind: str, environ: dict[str, str]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(_ZYGOTE_SCRIPT), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environ,
        )
        self.environ = environ
        self._lock = threading.Lock()  # one request at a time (tests start replicas in threads)
        self._ask({"op": "ready"})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        with self._lock:
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote exited ({self._process.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def spawn(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        output: tuple[str, str],
        *,
        umask: int = -1,
        session: bool = False,
    ) -> ZygoteChild:
        """`args` is `python -m MODULE ...` or `python SCRIPT ...`; `output` the files its
        stdout and stderr go to (appended); `session`: its own session and process group, as
        Popen's start_new_session."""
        answer = self._ask(
            {
                "op": "spawn",
                "argv": args[1:],  # after `python`
                "env": env,
                "cwd": str(cwd),
                "output": output,
                "umask": umask,
                "session": session,
            }
        )
        return ZygoteChild(self, int(answer["pid"]))

    def exit_code(self, pid: int) -> int | None:
        code = self._ask({"op": "status", "pid": pid})["code"]
        return None if code is None else int(code)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


_zygotes: dict[str, _Zygote] = {}
_zygote_lock = threading.Lock()


def the_zygote(kind: str = "llmrelay", environ: dict[str, str] | None = None) -> _Zygote:
    """The test process's zygote of `kind`, started (in `environ`, else this process's
    environment) at its first use."""
    with _zygote_lock:
        zygote = _zygotes.get(kind)
        if zygote is None:
            zygote = _Zygote(kind, dict(os.environ if environ is None else environ))
            _zygotes[kind] = zygote
            atexit.register(zygote.close)
        return zygote


def disabled(env: dict[str, str]) -> bool:
    return "0" in (os.environ.get("LLMRELAY_TEST_ZYGOTE"), env.get("LLMRELAY_TEST_ZYGOTE"))


def _imports_alike(env: dict[str, str], theirs: dict[str, str]) -> bool:
    return all(
        env.get(name) == theirs.get(name)
        for name in {*env, *theirs}
        if name.startswith("PYTHON") or name in _IMPORT_VARIABLES
    )


def popen_llmrelay(
    args: list[str], env: dict[str, str], cwd: Path, log: IO[bytes], umask: int = -1
) -> subprocess.Popen[bytes] | ZygoteChild:
    """`subprocess.Popen(args, ...)` with its output to `log`, forked from the zygote when it
    can be (see the module's docstring)."""
    if args[:3] == [sys.executable, "-m", "llmrelay"] and not disabled(env):
        zygote = the_zygote()
        if _imports_alike(env, zygote.environ):
            log.flush()
            return zygote.spawn(args, env, cwd, (log.name, log.name), umask=umask)
    return subprocess.Popen(
        args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, umask=umask
    )


def run_llmrelay(
    args: list[str],
    env: dict[str, str],
    *,
    cwd: Path | None = None,
    timeout: float = 300.0,
    umask: int = -1,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, "-m", "llmrelay", *args], capture_output=True, text=True)`
    (a one-shot command: migrate, apply, backup...), forked from the zygote when it can be."""
    argv = [sys.executable, "-m", "llmrelay", *args]
    folder = cwd or Path.cwd()
    if disabled(env) or not _imports_alike(env, the_zygote().environ):
        return subprocess.run(
            argv,
            env=env,
            cwd=folder,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            umask=umask,
        )
    with tempfile.TemporaryDirectory(prefix="llmrelay-run-") as output:
        out, err = Path(output, "stdout"), Path(output, "stderr")
        child = the_zygote().spawn(argv, env, folder, (str(out), str(err)), umask=umask)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        done = subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())
    if check:
        done.check_returncode()
    return done


# The zygote's side: run as a script (`python tests/support/zygote.py`), not imported.


def _reap(exited: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        exited[pid] = os.waitstatus_to_exitcode(status)


def _become(request: dict[str, Any]) -> None:
    """In the forked child: the process `python -m llmrelay ...` would have been."""
    os.chdir(request["cwd"])
    if request["session"]:
        os.setsid()
    if request["umask"] >= 0:
        os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdout_path, stderr_path = request["output"]
    stdout = os.open(stdout_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stderr = stdout
    if stderr_path != stdout_path:
        stderr = os.open(stderr_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.closerange(3, 65536)  # as Popen's close_fds: nothing of the zygote's stays open
    # sys.stdin, stdout and stderr stay the objects they are, on fds 0-2 now (new ones would
    # leave the old ones to close those fds when collected)
    argv = request["argv"]
    if argv[0] == "-m":
        sys.path[0] = request["cwd"]  # as `python -m`: the working directory first
        sys.argv = ["-m", *argv[2:]]  # run_module sets argv[0] to the module's file
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python SCRIPT`
        sys.argv = list(argv)


#: What each kind of zygote imports. `llmrelay`: what a gateway or worker imports, at its start
#: or later (the admin API and the console at their first request, the preparing child its
#: migrations, the server and the jobs at the start; found with `python -X importtime`): each
#: is about 0.2-2 s of CPU a process would spend again, and a child inherits it imported.
#: `agents`: the agent SDKs tests/agents/sdk_agents.py runs (3-3.5 s of CPU a run).
_LLMRELAY = (
    "llmrelay.app",
    "llmrelay.cli",
    "llmrelay.admin.app",
    "llmrelay.console.app",
    "llmrelay.database_setup",
    "llmrelay.server",
    "llmrelay.worker",
    "llmrelay.jobs.registry",
    "llmrelay.jobs.submissions",
    "alembic.command",
    "alembic.config",
    "aiosqlite",
    "argon2",
    "uvloop",
)
_AGENTS = (
    "openai",
    "agents",
    "pydantic_ai",
    "pydantic_ai.messages",
    "pydantic_ai.models.openai",
    "pydantic_ai.providers.openai",
)
_PRELOADED = {"llmrelay": _LLMRELAY, "agents": _AGENTS}


def _serve(kind: str) -> dict[str, Any] | None:
    """Answer requests until stdin closes (None), or return the start a forked child runs."""
    import importlib

    for module in _PRELOADED[kind]:
        importlib.import_module(module)

    if threading.active_count() != 1:  # a fork keeps only the thread that forked
        raise RuntimeError(f"the zygote runs threads: {threading.enumerate()}")

    exited: dict[int, int] = {}
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    for line in requests:
        request = json.loads(line)
        _reap(exited)
        answer: dict[str, Any]
        if request["op"] == "spawn":
            answers.flush()
            pid = os.fork()
            if pid == 0:
                return dict(request)
            exited.pop(pid, None)  # a pid used before by a child reaped since
            answer = {"pid": pid}
        elif request["op"] == "status":
            answer = {"code": exited.get(request["pid"])}
        else:
            answer = {"ok": True}
        answers.write(json.dumps(answer).encode() + b"\n")
        answers.flush()
    return None


if __name__ == "__main__":
    start = _serve(sys.argv[1])
    if start is not None:
        import runpy

        _become(start)
        if start["argv"][0] == "-m":
            runpy.run_module(start["argv"][1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(start["argv"][0], run_name="__main__")
