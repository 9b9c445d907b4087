"""`python -m llmrelay ...` processes forked from a process that has already imported llmrelay.

A gateway process spends about 1.5-2 s of CPU importing llmrelay, its app and their
dependencies before it does anything of its own, and the suite starts some 250 of them: about
a tenth of the suite's CPU on two cores. Each test process (each pytest-xdist worker) keeps one
zygote: an interpreter that imported `llmrelay.cli`, `llmrelay.app` and what they import later
(the admin API, the console, the migrations: `_PRELOADED`) once and then forks a child per
start. The child sets the start's environment, working directory, umask and output
file, and runs `llmrelay`'s `__main__` as `python -m llmrelay` would; it then exits through the
interpreter's normal exit (atexit handlers, flushed files), as a new process does.

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
    """The test process's side: requests over the zygote's stdin, answers on its stdout."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(_ZYGOTE_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=os.environ.copy(),
        )
        self.environ = dict(os.environ)
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
        self, args: list[str], env: dict[str, str], cwd: Path, log: IO[bytes], umask: int
    ) -> ZygoteChild:
        log.flush()
        answer = self._ask(
            {
                "op": "spawn",
                "argv": args[2:],  # after `python -m`: the module and its arguments
                "env": env,
                "cwd": str(cwd),
                "log": log.name,
                "umask": umask,
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


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None:
            _zygote = _Zygote()
            atexit.register(_zygote.close)
        return _zygote


def _disabled(env: dict[str, str]) -> bool:
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
    if args[:3] == [sys.executable, "-m", "llmrelay"] and not _disabled(env):
        zygote = _the_zygote()
        if _imports_alike(env, zygote.environ):
            return zygote.spawn(args, env, cwd, log, umask)
    return subprocess.Popen(
        args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, umask=umask
    )


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
    if request["umask"] >= 0:
        os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 65536)  # as Popen's close_fds: nothing of the zygote's stays open
    # sys.stdin, stdout and stderr stay the objects they are, on fds 0-2 now (new ones would
    # leave the old ones to close those fds when collected)
    sys.path[0] = request["cwd"]  # as `python -m`: the working directory first
    sys.argv = ["-m", *request["argv"][1:]]  # run_module sets argv[0] to the module's file


#: What a gateway or worker imports, at its start or later (the admin API and the console at
#: their first request, the preparing child its migrations, the server and the jobs at the
#: start; found with `python -X importtime`): each is about 0.2-2 s of CPU a process would
#: spend again, and a child inherits it imported.
_PRELOADED = (
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


def _serve() -> dict[str, Any] | None:
    """Answer requests until stdin closes (None), or return the start a forked child runs."""
    import importlib

    for module in _PRELOADED:
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
    start = _serve()
    if start is not None:
        import runpy

        _become(start)
        runpy.run_module(start["argv"][0], run_name="__main__", alter_sys=True)
