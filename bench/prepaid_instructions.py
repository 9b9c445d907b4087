"""Instructions per prepaid request against an unbilled one under callgrind, in one process
(`python -m bench.run --prepaid-rate --instructions`): the deterministic side of
bench/prepaid_rate.py, whose /proc CPU figure moves about 10 % from window to window.

One `llmrelay serve` on SQLite under `valgrind --tool=callgrind` (bench/instructions.py's
Counted: counting only inside each window, the lease writer's and the record writer's rounds
after it included), the bench config's `plain` model; the default tenant's wallet is turned
prepaid and back between windows (off, prepaid, off, prepaid), so both arms are the same
process, key and request, and every prepaid request is admitted against the wallet's lease.
The dumps are kept in the run's folder (`--keep-temp`) for callgrind_annotate. Needs the
Debian package valgrind.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.constants import BENCH_KEY
from bench.instructions import Counted
from bench.prepaid import ADMIN, _set_prepaid
from bench.procs import venv_program
from bench.report import machine
from bench.systems import llmrelay_config
from bench.upstream import request_body, upstream

ARMS = ("off", "prepaid", "off", "prepaid")


def count_prepaid_instructions(folder: Path, seconds: float) -> dict[str, Any]:
    if shutil.which("valgrind") is None:
        sys.exit("missing: valgrind (apt-get install -y valgrind)")
    counts: dict[str, list[float]] = {"off": [], "prepaid": []}
    with upstream(folder, ["plain"]) as nginx:
        config = folder / "llmrelay.yaml"
        config.write_text(llmrelay_config(nginx.port, ["plain"], (), (), ()))
        env = {
            **os.environ,
            "LLMRELAY_DATABASE_URL": f"sqlite:///{folder / 'bench.db'}",
            "LLMRELAY_ADMIN_TOKEN": ADMIN,
            "LLMRELAY_SNAPSHOT_POLL_S": "0.2",
        }
        command = [venv_program("llmrelay"), "serve", "--config", str(config)]
        relay = Counted("llmrelay", folder, command, env)
        try:
            relay.wait_ready("/readyz", "")
            for arm in ARMS:
                _set_prepaid(f"http://127.0.0.1:{relay.port}", arm == "prepaid")
                total, requests = relay.count(
                    "/v1/chat/completions", request_body("plain"), BENCH_KEY, seconds
                )
                counts[arm].append(total / requests)
                print(f"  {arm:<8} {total / requests / 1000:8.1f}k per request", flush=True)
        finally:
            relay.stop()
    off, prepaid = statistics.mean(counts["off"]), statistics.mean(counts["prepaid"])
    return {
        "kind": "prepaid-instructions",
        "machine": machine(),
        "per_request": counts,
        "ratio": round(prepaid / off, 3),
        "extra_per_request": round(prepaid - off),
    }


def markdown(data: dict[str, Any]) -> str:
    off, prepaid = data["per_request"]["off"], data["per_request"]["prepaid"]
    return (
        "| unbilled (windows) | prepaid (windows) | prepaid / unbilled | extra per request |\n"
        "| --- | --- | --- | --- |\n"
        f"| {_windows(off)} | {_windows(prepaid)} | {data['ratio']:.3f} "
        f"| {data['extra_per_request'] / 1000:.1f}k |"
    )


def _windows(counts: list[float]) -> str:
    return " / ".join(f"{count / 1000:.1f}k" for count in counts)
