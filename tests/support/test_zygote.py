"""The zygote's starts behave as `subprocess.Popen` of `python -m llmrelay ...` would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.gateway_process import GatewayProcess
from tests.support.zygote import ZygoteChild, popen_llmrelay, the_zygote


def test_a_one_shot_command_is_forked_unless_it_would_import_otherwise(tmp_path: Path) -> None:
    with (tmp_path / "out.log").open("ab") as log:
        child = popen_llmrelay(
            [sys.executable, "-m", "llmrelay", "--help"],
            dict(os.environ),
            tmp_path,
            log,
        )
    assert isinstance(child, ZygoteChild)
    assert child.wait(60) == 0
    assert "serve" in (tmp_path / "out.log").read_text()  # the CLI's help, to its log
    # A start whose interpreter would import otherwise is not forked.
    with (tmp_path / "pure.log").open("ab") as log:
        plain = popen_llmrelay(
            [sys.executable, "-m", "llmrelay", "--help"],
            {**os.environ, "LLMRELAY_PURE_PYTHON": "1"},
            tmp_path,
            log,
        )
    assert isinstance(plain, subprocess.Popen)
    assert plain.wait(60) == 0


def test_a_gateway_keeps_its_environment_folder_and_exit_codes(tmp_path: Path) -> None:
    database = tmp_path / "own.db"  # the environment's LLMRELAY_DATABASE_URL, made by serve
    gateway = GatewayProcess(tmp_path, demo=True, database_url=f"sqlite:///{database}")
    gateway.start()
    assert isinstance(gateway.process, ZygoteChild)
    assert database.exists()
    assert Path(f"/proc/{gateway.process.pid}/cwd").resolve() == tmp_path.resolve()
    assert gateway.process.poll() is None
    assert gateway.stop() == 0, gateway.logs()  # SIGTERM: drained, exit 0
    assert "Uvicorn running" in gateway.logs()  # its output went to its log
    gateway.start()
    assert gateway.kill() == -signal.SIGKILL


def test_a_script_runs_forked_with_its_own_output_session_and_exit_code(tmp_path: Path) -> None:
    """The `agents` zygote's way (tests/support/agent_clients.py): `python SCRIPT ...` with
    stdout and stderr to files of their own, in a session of its own, in the environment
    given and not the zygote's."""
    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys\n"
        "print(sys.argv[1:], os.environ.get('ONLY_THE_RUN'), 'HOME' in os.environ)\n"
        "print(os.getsid(0) == os.getpid(), os.getcwd(), sys.path[0], file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    forked = the_zygote("agents", {"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    child = forked.spawn(
        [sys.executable, str(script), "a", "b"],
        {"PATH": os.environ["PATH"], "ONLY_THE_RUN": "yes"},
        work,
        (str(out), str(err)),
        session=True,
    )
    assert child.wait(60) == 3
    assert out.read_text() == "['a', 'b'] yes False\n"
    assert err.read_text() == f"True {work} {tmp_path}\n"
