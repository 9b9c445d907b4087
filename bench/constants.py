"""Where things are and the fixed figures every part of the benchmark shares."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
RESULTS = HERE / "results"
BARE_PROXY = HERE / "bare_proxy.py"
ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")
LOADGEN_CORE = "0"
#: The system under test's core; BENCH_SUT_CORE moves it (for callgrind counts, which do
#: not depend on what else runs, while a second count runs on core 1).
SUT_CORE = os.environ.get("BENCH_SUT_CORE", "1")
CLK_TCK = os.sysconf("SC_CLK_TCK")
COLD_STARTS = 3
BENCH_KEY = "sk-bench-0123456789abcdefghijklmnopqrstuv"
#: bench.limits: a key whose key and project have every kind of limit (none ever reached),
#: and a key with rpm and tpm limits of its own only (a common setup).
LIMITED_KEY = "sk-bench-limited-0123456789abcdefghijklmn"
KEY_LIMITED_KEY = "sk-bench-keylimits-0123456789abcdefghijk"
ALL_MODES = ("plain", "sse", "sse-paced", "embeddings")
#: Modes that are not chat completions: the path each calls, on llmrelay and on nginx (the
#: bare proxy appends nginx's path to its upstream), and what a JSON answer must say it is.
EMBEDDINGS = "embeddings"
PACED_PAUSE_S = 0.001
FOREIGN_LIMIT = 0.05  # share of core 1 used by other processes that spoils a window
#: How often a spoilt window is measured again, and how long to wait for a quiet core 1
#: before a window. On a machine that is never quiet (other sessions' test suites) the
#: environment can lower them: BENCH_FOREIGN_RETRIES=0 BENCH_QUIET_WAIT_S=1, and the run
#: then reports how much of core 1 other processes took in each window.
FOREIGN_RETRIES = int(os.environ.get("BENCH_FOREIGN_RETRIES", "2"))
QUIET_WAIT_S = float(os.environ.get("BENCH_QUIET_WAIT_S", "180"))
