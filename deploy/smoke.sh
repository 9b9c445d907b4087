#!/usr/bin/env bash
# Build llmrelay's image and run the deployment files against it with podman and
# podman-compose, checking what an operator relies on (docs/deployment.md, "What was tested").
#
#   deploy/smoke.sh [build] [single] [replicas]     (no argument: all three, in that order)
#
# build     deploy/Dockerfile -> llmrelay:latest; its size, user and group 10001, a 0700 state
#           folder, no pip or build tools, the compiled build, redis importable, the installed
#           distributions exactly requirements/runtime.lock.
# single    compose.single.yaml: /readyz, the health check, a chat request and a stream, the
#           files 0600, a backup 0600, SIGTERM exit 0.
# replicas  compose.replicas.yaml + compose.workers.yaml on stand-in images (PostgreSQL, Redis,
#           nginx), brought up in stages (podman-compose ignores health conditions): two
#           replicas, the worker, a chat request and a stream through nginx, an `apply` seen
#           by both replicas within 2 s (the Redis signal), a background job run by the worker
#           only, a replica killed and restarted by its restart policy, SIGTERM drain of a
#           replica with an open stream.
#
# Needs: podman (Debian 12: 4.3, with runc), podman-compose, curl, python3. The base images
# (python:3.11-slim-bookworm, debian:bookworm-slim) and the stand-ins come from Debian's own
# packages on machines with no registry: .ci/containers/base-images.sh makes those missing
# (CONTAINERS names another folder with base-images.sh and standins/). Everything runs under
# the projects llmrelay-smoke-single and llmrelay-smoke-replicas and is removed at the end
# (KEEP=1 keeps a stack up for a look). Prints PASS/FAIL per check and, when a check of a
# stack failed, the state and the last log lines of each of its containers; ends with the
# failed checks' names and exits 1 if one failed. .ci/run runs it (.ci/image).
set -uo pipefail
shopt -s lastpipe  # `... | apply` records its check in this shell
REPO=$(cd "$(dirname "$0")/.." && pwd)
CONTAINERS=${CONTAINERS:-$REPO/.ci/containers}
# The host port of the stacks (nginx's, or the single gateway's): a free one above the
# blocks the test suite's workers take ports from (tests/support/ports.py), which may run
# at the same time (.ci/run).
PORT=${SMOKE_PORT:-$(python3 -c 'import random, socket
for port in random.sample(range(30000, 32000), 2000):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break')}
IMAGE=${IMAGE:-llmrelay:latest}
FAILED=0
FAILURES=()  # the names of the failed checks, for the summary at the end

# podman 4.3 without systemd says on every start and stop that it cannot set up the health
# check timers (nothing runs them here: `podman healthcheck run` does): noise, left out.
podman() { command podman "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }
pass() { printf 'PASS  %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; FAILED=1; FAILURES+=("$*"); }
# check NAME COMMAND...: PASS when the command succeeds.
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
note() { printf '....  %s\n' "$*"; }
secret() { python3 -c 'import secrets; print(secrets.token_urlsafe(48))'; }
# within SECONDS COMMAND...: retry the command once a second until it succeeds.
within() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 1
  done
}
# The containers of a compose service, by the labels podman-compose sets.
containers() {
  podman ps -a --filter "label=com.docker.compose.project=$1" \
    --filter "label=com.docker.compose.service=$2" --format '{{.Names}}' | sort
}
ready() { curl -fsS --max-time 5 "$1/readyz" >/dev/null; }
chat() {  # chat URL KEY MODEL STREAM -> the answer's body
  curl -sS -N --max-time 120 "$1/v1/chat/completions" -H "Authorization: Bearer $2" \
    -H 'Content-Type: application/json' \
    -d "{\"model\": \"$3\", \"stream\": $4, \"messages\": [{\"role\": \"user\", \"content\": \"smoke test\"}]}"
}
mode_of() { podman exec "$1" stat -c '%a' "$2"; }
# apply CHECK CONTAINER < YAML: `llmrelay apply` inside a container of the stack, a check
# (its output shown when it fails).
# (APPLIED: the config generation it made, for waiting on the replicas; its output's lines
# about the config signal are shown: a publish that failed is the first suspect when a
# replica is late.)
APPLIED=0
apply() {
  local out
  APPLIED=""
  if out=$(podman exec -i "$2" llmrelay apply /dev/stdin 2>&1); then
    pass "$1"
    APPLIED=$(printf '%s\n' "$out" | sed -n 's/.*config generation \([0-9]*\).*/\1/p' | tail -1)
    printf '%s\n' "$out" | grep -E 'config_signal' | cut -c1-200 | sed 's/^/      apply: /'
  else
    fail "$1"
    # (the last lines of the output, less the frame of a rich traceback)
    printf '%s\n' "$out" | grep -v '^[│╭╰]' | tail -8 | sed 's/^/      /'
  fi
}
# readyz_field CONTAINER EXPRESSION: a Python expression of `r`, a replica's own /readyz
# (asked at its address on the stack's network, not through nginx).
readyz_field() {
  local ip
  ip=$(podman inspect "$1" --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}')
  curl -sS --max-time 5 "http://$ip:8080/readyz" \
    | python3 -c "import json, sys; r = json.load(sys.stdin); print($2)"
}
# listening CONTAINER: its config signal line to Redis is open.
listening() {
  test "$(readyz_field "$1" 'r["config_signal"]["transport"] + ":" + r["config_signal"]["state"]')" \
    = redis:listening
}
# serves CONTAINER GENERATION: it serves that config generation (or a later one).
serves() { test "$(readyz_field "$1" 'r.get("snapshot_generation", -1)')" -ge "$2"; }
# down COMPOSE...: the stack's containers with their anonymous volumes (the images' VOLUMEs,
# which podman-compose's `down -v` leaves), its named volumes, then its network (which it
# leaves too, and another stack's network may want the same subnet).
down() {
  local ids volumes=""
  ids=$(podman ps -aq --filter "label=com.docker.compose.project=$project")
  [ -z "$ids" ] || volumes=$(podman inspect $ids \
    --format '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}' 2>/dev/null)
  "$@" down -v >/dev/null 2>&1
  for volume in $volumes; do podman volume rm -f "$volume" >/dev/null 2>&1; done
  podman network rm -f "${project}_default" >/dev/null 2>&1 || true
}

# logs PROJECT: each container of the stack, its state and its last log lines (a check of
# the stack failed: what the containers said is the first thing to read).
logs() {
  local name
  printf '....  the containers of %s, their state and last 40 log lines:\n' "$1"
  podman ps -a --filter "label=com.docker.compose.project=$1" \
    --format '      {{.Names}}  {{.Status}}  {{.Image}}'
  for name in $(podman ps -a --filter "label=com.docker.compose.project=$1" --format '{{.Names}}' | sort); do
    printf '      --- %s\n' "$name"
    podman logs --tail 40 "$name" 2>&1 | sed 's/^/      | /'
  done
}
# failed_since N: a check failed since the count of failures was N.
failed_since() { [ "${#FAILURES[@]}" -gt "$1" ]; }

build() {
  local ca=() started=$SECONDS
  if ! podman image exists docker.io/library/python:3.11-slim-bookworm; then
    note "no base image: $CONTAINERS/base-images.sh makes it from Debian's packages"
    bash "$CONTAINERS/base-images.sh" engine debian python || { fail "build: the base images"; return; }
    note "base images took $((SECONDS - started)) s"
  fi
  # Behind a TLS-intercepting proxy pip in the build needs the host's CA bundle.
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "${TMPDIR:-/tmp}/llmrelay-pip-ca.conf"
    ca=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro
        -v "${TMPDIR:-/tmp}/llmrelay-pip-ca.conf:/etc/pip.conf:ro")
  fi
  local built=$SECONDS log="${TMPDIR:-/tmp}/llmrelay-smoke-build.log"
  # The build's own output (long) goes to a file, shown (its end) when the build fails.
  if ! podman build --format docker "${ca[@]}" -f "$REPO/deploy/Dockerfile" -t "$IMAGE" "$REPO" >"$log" 2>&1; then
    fail "build: podman build (its last lines below; all of it in $log)"
    tail -40 "$log" | sed 's/^/      /'
    return
  fi
  note "podman build took $((SECONDS - built)) s ($(grep -c 'Using cache' "$log") steps cached; output in $log)"
  local size
  size=$(podman image inspect "$IMAGE" --format '{{.Size}}')
  note "image size: $((size / 1000000)) MB ($size bytes; podman image inspect)"
  run() { podman run --rm --no-healthcheck --entrypoint "$1" "$IMAGE" "${@:2}"; }
  check "build: runs as uid 10001, gid 10001" \
    test "$(run id -u):$(run id -g):$(run id -gn)" = "10001:10001:llmrelay"
  check "build: /var/lib/llmrelay is 0700 llmrelay:llmrelay" \
    test "$(run stat -c '%a %U:%G' /var/lib/llmrelay)" = "700 llmrelay:llmrelay"
  check "build: the hot path is compiled" \
    test "$(run python -c 'import llmrelay._compiled as c; print(c.MODE)')" = compiled
  check "build: redis (the config signal) is installed" run python -c 'import redis.asyncio'
  check "build: no pip, setuptools, wheel or mypy in the virtualenv, no tests of llmrelay" \
    run python -c 'import importlib.util as u, pathlib, sys
gone = [m for m in ("pip", "setuptools", "mypy", "mypyc", "wheel") if u.find_spec(m)]
tests = [str(p) for p in pathlib.Path("/opt/llmrelay").glob("lib/*/site-packages/llmrelay*/tests")]
sys.exit(bool(gone or tests))'
  # Every distribution installed is in the lock at its version; every line of the lock
  # without a marker is installed (a line with one only where its marker holds).
  local installed
  installed=$(run python -c 'import importlib.metadata as m
print("\n".join(f"{d.name}=={d.version}" for d in m.distributions() if d.name != "llmrelay"))')
  check "build: the installed distributions are requirements/runtime.lock's" \
    python3 - "$REPO/requirements/runtime.lock" "$installed" <<'PY'
import re, sys
def key(line):
    name, version = line.split(";")[0].strip().split("==")
    return re.sub(r"[-_.]+", "-", name).lower(), version
lines = [l for l in open(sys.argv[1]).read().splitlines() if l and not l.startswith("#")]
locked = {key(l) for l in lines}
required = {key(l) for l in lines if ";" not in l}
installed = {key(l) for l in sys.argv[2].split()}
for name, version in sorted(installed - locked):
    print(f"  installed, not in the lock: {name}=={version}")
for name, version in sorted(required - installed):
    print(f"  in the lock, not installed: {name}=={version}")
sys.exit(bool(installed - locked or required - installed))
PY
}

single() {
  local project=llmrelay-smoke-single url="http://127.0.0.1:$PORT" key=smoke-key-0123456789abcdef
  export LLMRELAY_SECRET_KEY LLMRELAY_ADMIN_TOKEN LLMRELAY_HTTP_PORT=$PORT
  LLMRELAY_SECRET_KEY=$(secret) LLMRELAY_ADMIN_TOKEN=$(secret)
  local compose=(podman-compose -p "$project" -f "$REPO/deploy/compose.single.yaml")
  down "${compose[@]}"
  local failures=${#FAILURES[@]} out
  out=$("${compose[@]}" up -d 2>&1) || { fail "single: up"; printf '%s\n' "$out" | tail -20; logs "$project"; return; }
  local c
  c=$(containers "$project" llmrelay)
  check "single: /readyz on port $PORT within 60 s" within 60 ready "$url"
  check "single: the image's health check says healthy" podman healthcheck run "$c"
  check "single: the process runs as 10001:10001" \
    test "$(podman exec "$c" id -u):$(podman exec "$c" id -g)" = "10001:10001"
  apply "single: llmrelay apply (the mock provider, a model, a key)" "$c" <<EOF
providers: [{slug: mock, type: mock}]
models: [{name: smoke, routes: [{provider: mock, upstream_model: mock-chat}]}]
projects: [{name: smoke, keys: [{name: smoke, key: $key}]}]
EOF
  check "single: a chat request answers (the built-in mock provider)" \
    within 10 bash -c "$(declare -f chat); chat $url $key smoke false | grep -q '\"content\":\"smoke test\"'"
  check "single: a streamed chat request ends with [DONE]" \
    bash -c "$(declare -f chat); chat $url $key smoke true | grep -q 'data: \[DONE\]'"
  check "single: llmrelay backup" podman exec "$c" llmrelay backup /var/lib/llmrelay/backup.db
  check "single: the state folder 0700, the database and the backup 0600" test \
    "$(mode_of "$c" /var/lib/llmrelay) $(mode_of "$c" /var/lib/llmrelay/llmrelay.db) $(mode_of "$c" /var/lib/llmrelay/backup.db)" = "700 600 600"
  note "single: $(podman exec "$c" sh -c 'stat -c "%a %U:%G %n" /var/lib/llmrelay /var/lib/llmrelay/*' | tr '\n' ';')"
  podman stop -t 90 "$c" >/dev/null
  check "single: SIGTERM: exit code 0" test "$(podman inspect "$c" --format '{{.State.ExitCode}}')" = 0
  failed_since "$failures" && logs "$project"
  [ -n "${KEEP:-}" ] || down "${compose[@]}"
}

# An OpenAI-compatible upstream that streams slowly (CHUNKS pieces, DELAY s apart), run from
# the image itself (Starlette and uvicorn are in it): a stream open long enough to stop a
# replica under it, and a background job long enough to see who runs it.
SLOW_UPSTREAM='
import asyncio, json, time
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
CHUNKS, DELAY = 16, 0.5
def chunk(model, delta, finish=None, usage=None):
    body = {"id": "slow", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return "data: " + json.dumps(body) + "\n\n"
async def chat(request):
    body = await request.json()
    model = body.get("model", "slow")
    usage = {"prompt_tokens": 2, "completion_tokens": CHUNKS, "total_tokens": CHUNKS + 2}
    if not body.get("stream"):
        await asyncio.sleep(CHUNKS * DELAY)
        text = " ".join(f"w{i}" for i in range(CHUNKS))
        return JSONResponse({"id": "slow", "object": "chat.completion", "created": int(time.time()),
            "model": model, "usage": usage, "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": text}}]})
    async def events():
        yield chunk(model, {"role": "assistant", "content": ""})
        for i in range(CHUNKS):
            await asyncio.sleep(DELAY)
            yield chunk(model, {"content": f"w{i} "})
        yield chunk(model, {}, "stop", usage)
        yield "data: [DONE]\n\n"
    return StreamingResponse(events(), media_type="text/event-stream")
uvicorn.run(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
            host="0.0.0.0", port=9000, log_level="warning")
'

# Waits in a replica for KEY to be accepted: prints `polling` once it asks, then the
# wall-clock time the key was first accepted.
WATCH_KEY='
import sys, time, urllib.request, urllib.error
key, deadline = sys.argv[1], time.time() + 60
print("polling", flush=True)
while time.time() < deadline:
    request = urllib.request.Request("http://127.0.0.1:8080/v1/models",
                                     headers={"Authorization": "Bearer " + key})
    try:
        urllib.request.urlopen(request, timeout=2)
        print(f"{time.time():.3f}")
        sys.exit(0)
    except (urllib.error.URLError, OSError):
        time.sleep(0.05)
sys.exit(1)
'

# The replicas stack's config: the mock provider, the slow upstream, a project with KEYS.
replicas_config() {
  cat <<EOF
providers:
  - {slug: mock, type: mock}
  - {slug: slow, type: openai_compatible, base_url: "http://slow:9000/v1", api_key: sk-slow}
models:
  - {name: smoke, routes: [{provider: mock, upstream_model: mock-chat}]}
  - {name: slow, routes: [{provider: slow, upstream_model: slow}]}
projects: [{name: smoke, keys: [$1]}]
EOF
}

standins() {
  local name
  for name in postgres:16 redis:7 nginx:1.27; do
    podman image exists "docker.io/library/$name" && continue
    note "building the stand-ins for PostgreSQL, Redis and nginx: $CONTAINERS/base-images.sh standins"
    bash "$CONTAINERS/base-images.sh" standins || fail "the stand-in images"
    return
  done
}

replicas() {
  local project=llmrelay-smoke-replicas url="http://127.0.0.1:$PORT"
  local key=smoke-key-0123456789abcdef key2=smoke-key2-0123456789abcdef
  standins
  export LLMRELAY_SECRET_KEY LLMRELAY_ADMIN_TOKEN POSTGRES_PASSWORD LLMRELAY_HTTP_PORT=$PORT
  LLMRELAY_SECRET_KEY=$(secret) LLMRELAY_ADMIN_TOKEN=$(secret) POSTGRES_PASSWORD=$(secret)
  # The replicas poll for changes every 30 s here (2 s by default): a change seen within 2 s
  # came by the Redis signal.
  local override
  override=$(mktemp --suffix=.yaml)
  printf 'services:\n  llmrelay:\n    environment:\n      LLMRELAY_SNAPSHOT_POLL_S: "30"\n' >"$override"
  local compose=(podman-compose -p "$project" -f "$REPO/deploy/compose.replicas.yaml"
                 -f "$REPO/deploy/compose.workers.yaml" -f "$override")
  podman rm -f "$project-slow" >/dev/null 2>&1
  down "${compose[@]}"

  # In stages: podman-compose 1.x starts a service without waiting for its dependencies'
  # health conditions.
  local failures=${#FAILURES[@]} out
  out=$("${compose[@]}" up -d --no-deps postgres redis 2>&1) \
    || { fail "replicas: up databases"; printf '%s\n' "$out" | tail -20; logs "$project"; return; }
  local pg redis
  pg=$(containers "$project" postgres) redis=$(containers "$project" redis)
  check "replicas: PostgreSQL healthy within 90 s" within 90 podman healthcheck run "$pg"
  check "replicas: Redis healthy within 30 s" within 30 podman healthcheck run "$redis"
  # (podman-compose 1.0.3 starts a service's dependencies again: their "name in use"
  # errors are harmless and hidden)
  "${compose[@]}" up -d --no-deps migrate >/dev/null 2>&1
  local migrate
  migrate=$(containers "$project" migrate)
  check "replicas: migrate ran once and exited 0" test "$(podman wait "$migrate")" = 0
  # The slow upstream joins the stack's network now, before the replicas: each container
  # that joins makes podman's DNS server (aardvark-dns) reload, and a name looked up at that
  # moment may not resolve (the first `apply` failed so: "Name or service not known").
  local network
  network=$(podman inspect "$pg" --format '{{range $name, $_ := .NetworkSettings.Networks}}{{$name}}{{end}}')
  podman run -d --name "$project-slow" --network "$network" --network-alias slow \
    --entrypoint python "$IMAGE" -c "$SLOW_UPSTREAM" >/dev/null
  "${compose[@]}" up -d --no-deps llmrelay worker >/dev/null 2>&1
  local -a replica
  mapfile -t replica < <(containers "$project" llmrelay)
  local worker
  worker=$(containers "$project" worker)
  check "replicas: two replicas (deploy.replicas: 2 with mode: replicated)" test "${#replica[@]}" = 2
  check "replicas: one worker" test -n "$worker"
  local r
  for r in "${replica[@]}"; do
    check "replicas: $r healthy within 90 s" within 90 podman healthcheck run "$r"
  done
  "${compose[@]}" up -d --no-deps nginx >/dev/null 2>&1
  check "replicas: /readyz through nginx within 60 s" within 60 ready "$url"
  # Healthy is not yet listening: the config signal's line to Redis opens after the first
  # snapshot loads. Every check of a change below waits for it (the replica's own /readyz).
  for r in "${replica[@]}"; do
    check "replicas: $r listens to the config signal on Redis (its /readyz) within 60 s" \
      within 60 listening "$r"
  done

  # nginx joined the network last: every name the replicas use resolves again before the
  # first `apply` (which connects to PostgreSQL and Redis by name) runs in one of them.
  check "replicas: postgres, redis and slow resolve inside ${replica[0]} within 30 s" \
    within 30 podman exec "${replica[0]}" python -c \
    'import socket; [socket.getaddrinfo(name, None) for name in ("postgres", "redis", "slow")]'
  local began=$SECONDS
  replicas_config "{name: smoke, key: $key}" \
    | apply "replicas: llmrelay apply (mock and slow providers, models, a key)" "${replica[0]}"
  # Both replicas serve the applied generation before the first request through nginx
  # (either may get it): waited for, with room for the 30 s poll should the signal be lost
  # (then the note says so, and the apply's output above says why).
  if [ -n "$APPLIED" ]; then
    for r in "${replica[@]}"; do
      check "replicas: $r serves config generation $APPLIED within 45 s" \
        within 45 serves "$r" "$APPLIED"
    done
    note "both replicas served generation $APPLIED $((SECONDS - began)) s after the apply began"
  fi
  check "replicas: a chat request through nginx" \
    within 30 bash -c "$(declare -f chat); chat $url $key smoke false | grep -q '\"content\":\"smoke test\"'"
  failed_since "$failures" && note "answer: $(chat "$url" "$key" smoke false | head -c 300)"
  check "replicas: a stream through nginx ends with [DONE]" \
    bash -c "$(declare -f chat); chat $url $key smoke true | grep -q 'data: \[DONE\]'"

  # A change made on one replica reaches both within 2 s: the Redis signal, not the poll.
  check "replicas: the replicas poll every 30 s only (the override)" \
    test "$(podman exec "${replica[0]}" printenv LLMRELAY_SNAPSHOT_POLL_S)" = 30
  local watch0 watch1 applied seen0 seen1
  watch0=$(mktemp) watch1=$(mktemp)
  podman exec "${replica[0]}" python -c "$WATCH_KEY" "$key2" >"$watch0" &
  local w0=$!
  podman exec "${replica[1]}" python -c "$WATCH_KEY" "$key2" >"$watch1" &
  local w1=$!
  within 30 grep -q polling "$watch0"
  within 30 grep -q polling "$watch1"
  local began
  began=$(date +%s.%N)
  replicas_config "{name: smoke, key: $key}, {name: second, key: $key2}" \
    | apply "replicas: llmrelay apply of a second key" "${replica[0]}"
  applied=$(date +%s.%N)
  wait "$w0" "$w1"
  seen0=$(sed -n 2p "$watch0") seen1=$(sed -n 2p "$watch1")
  note "$(python3 -c "print(f'apply took {$applied - $began:.2f} s; the new key accepted by the replicas {${seen0:-1e9} - $began:.2f} s and {${seen1:-1e9} - $began:.2f} s after it began')")"
  check "replicas: the new key works on both replicas within 2 s of the apply" \
    python3 -c "import sys; sys.exit(not max(${seen0:-1e9}, ${seen1:-1e9}) - $applied <= 2)"
  # Once listening: a replica whose first connection failed (podman's DNS reloading as its
  # neighbours joined, on a loaded machine) says so (config_signal_lost, from `connecting`)
  # and was listening before the checks above began; what must not happen is a loss after.
  check "replicas: no replica lost the config signal once it listened" \
    bash -c "! podman logs ${replica[0]} 2>&1 | sed -n '/config_signal_listening/,\$p' | grep -q config_signal_lost && ! podman logs ${replica[1]} 2>&1 | sed -n '/config_signal_listening/,\$p' | grep -q config_signal_lost"
  rm -f "$watch0" "$watch1"

  # A background response is a durable job: the worker runs it, the replicas never do. Its
  # container resolves the slow upstream's name first (a CI run on 2026-12-07: its lookups failed
  # for 40 s with "Temporary failure in name resolution" while aardvark-dns reloaded; another
  # that evening passed 30 s and then ran the job fine).
  check "replicas: slow resolves inside $worker within 90 s" \
    within 90 podman exec "$worker" python -c 'import socket; socket.getaddrinfo("slow", None)'
  local submitted id owner worker_host
  submitted=$(curl -sS --max-time 30 "$url/v1/responses" -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' -d '{"model": "slow", "input": "job", "background": true}')
  id=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get("id", ""))' "$submitted")
  for _ in $(seq 120); do  # the job runs for about 8 s (the slow upstream)
    owner=$(podman exec "$pg" psql -U llmrelay -d llmrelay -Atc \
      "SELECT lease_owner FROM jobs WHERE status = 'running' AND kind = 'background_response'")
    [ -z "$owner" ] || break
    sleep 0.25
  done
  worker_host=$(podman exec "$worker" cat /etc/hostname)
  note "background response $id run by ${owner:-nobody seen} (worker's host name: $worker_host)"
  check "replicas: the background job is run by the worker" test "${owner%%:*}" = "$worker_host"
  check "replicas: the background response completes" within 60 bash -c \
    "curl -fsS $url/v1/responses/$id -H 'Authorization: Bearer $key' | grep -q '\"status\":\"completed\"'"
  if failed_since "$failures"; then
    note "the response now: $(curl -sS --max-time 10 "$url/v1/responses/$id" -H "Authorization: Bearer $key" | head -c 600)"
    note "its job: $(podman exec "$pg" psql -U llmrelay -d llmrelay -Atc \
      "SELECT status, attempts, lease_owner, started_at, finished_at, left(coalesce(error, ''), 400) FROM jobs WHERE kind = 'background_response'")"
  fi

  # Killed (not stopped): the restart policy brings the replica back.
  local pid before
  pid=$(podman inspect "${replica[0]}" --format '{{.State.Pid}}')
  before=$(podman inspect "${replica[0]}" --format '{{.State.StartedAt}}')
  kill -KILL "$pid"
  check "replicas: a killed replica is restarted by its restart policy within 60 s" \
    within 60 bash -c "test \"\$(podman inspect ${replica[0]} --format '{{.State.StartedAt}}')\" != '$before' && podman healthcheck run ${replica[0]}"
  check "replicas: ... and serves through nginx again" within 30 ready "$url"

  # SIGTERM with a stream open on the replica: the stream ends whole, the exit code is 0.
  local ip stream
  ip=$(podman inspect "${replica[1]}" --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}')
  stream=$(mktemp)
  chat "http://$ip:8080" "$key" slow true >"$stream" &
  local client=$!
  within 30 grep -q 'w0 ' "$stream"
  check "replicas: a stream is open on the replica (first chunk in, no [DONE] yet)" \
    bash -c "grep -q 'w0 ' $stream && ! grep -q 'DONE' $stream"
  local stopping=$SECONDS
  podman stop -t 90 "${replica[1]}" >/dev/null
  note "the replica took $((SECONDS - stopping)) s to stop (its stream had about 8 s to go)"
  wait "$client"
  check "replicas: SIGTERM with a stream open: the stream got every chunk and [DONE]" \
    bash -c "grep -q 'w15 ' $stream && grep -q 'data: \[DONE\]' $stream"
  check "replicas: ... and the replica exited 0" \
    test "$(podman inspect "${replica[1]}" --format '{{.State.ExitCode}}')" = 0
  rm -f "$stream"
  podman start "${replica[1]}" >/dev/null

  failed_since "$failures" && { logs "$project"; podman logs --tail 40 "$project-slow" 2>&1 | sed 's/^/      slow | /'; }
  if [ -z "${KEEP:-}" ]; then
    podman rm -f "$project-slow" >/dev/null 2>&1
    down "${compose[@]}"
    rm -f "$override"
    check "replicas: down removed every container of the stack" \
      test -z "$(podman ps -a --filter "label=com.docker.compose.project=$project" --format '{{.Names}}')"
  fi
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build single replicas)
for step in "${steps[@]}"; do
  case $step in
    build | single | replicas) "$step" ;;
    *) echo "usage: $0 [build] [single] [replicas]" >&2; exit 2 ;;
  esac
done
if [ "$FAILED" = 0 ]; then
  echo "deploy/smoke.sh ${steps[*]}: every check passed"
else
  echo "deploy/smoke.sh ${steps[*]}: ${#FAILURES[@]} check(s) failed:"
  printf '  FAIL  %s\n' "${FAILURES[@]}"
fi
exit "$FAILED"
