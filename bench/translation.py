"""Translation cost: chat clients served from an Anthropic provider against chat clients served
from an OpenAI-compatible one, on one llmrelay process (`python -m bench.run --translation
[--quick]`).

The issue's target: "Translation cost: chat client -> anthropic upstream vs chat -> openai
upstream, non-stream and stream, reported as a ratio (target >= 0.85)", the ratio being the
anthropic model's throughput over the openai model's. Per mode (plain, sse) two one-route
models: bench-openai-MODE, whose provider (openai_compatible) answers from nginx's
/MODE/v1/chat/completions, and bench-anthropic-MODE, whose provider (anthropic) answers from
/anthropic-MODE/v1/messages the same text and token counts as a Message, or as a Messages
event stream in one write (nginx cannot choose by the body's "stream", hence a location per
mode). The client sends both the same chat request; only the anthropic route translates: the
request to Messages, the answer (or every event) back to chat. The openai route passes the
provider's bytes on with the model renamed.

Every answer must be a whole chat completion or chat stream (ending with `data: [DONE]`) that
carries the role, the text (every content delta of a stream, in order), the finish reason
and the token counts (bench.upstream.answer_fragments), checked by wrk's Lua script for every
answer and before any load by bench.systems.check_answers. The request records are read
after the run: both arms must have recorded the same token counts.

Windows alternate as in bench.routing: in each round every cell (mode, concurrency) runs the
two models back to back, openai then anthropic in even rounds, the other way in odd ones;
the report gives medians over the rounds and each round's own ratio.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.load import Driver
from bench.report import Target, machine, paired, print_table
from bench.systems import (
    TRANSLATION_ARMS,
    System,
    check_answers,
    start_llmrelay,
    translated_mode,
)
from bench.upstream import answer_fragments, tokens_of, upstream

#: A JSON answer, and a stream in one write (the harsh case: every event translated).
TRANSLATION_MODES = ("plain", "sse")
TARGET_PCT = 85.0  # anthropic throughput as a share of openai throughput


def compare_translation(folder: Path, quick: bool, rounds: int | None = None) -> dict[str, Any]:
    modes = TRANSLATION_MODES
    levels = [1, 64]
    duration = 3.0 if quick else 10.0
    rounds = rounds or (3 if quick else 5)
    called = [translated_mode(m, api) for m in modes for api in TRANSLATION_ARMS]
    info = machine()  # now: the commit and source hash of the code about to be started
    relay: System | None = None
    with upstream(folder, modes) as nginx:
        try:
            print(f"starting llmrelay on core 1 with models {', '.join(called)} ...")
            relay = start_llmrelay(folder / "llmrelay", nginx.port, modes, translated=modes)
            check_answers(relay, called)
            driver = Driver(folder, nginx)
            print("warm-up ...", flush=True)
            for label in called:
                driver.window(relay, label, 64, 2 if quick else 5, keep=False)
            first, second = TRANSLATION_ARMS
            print(
                f"measuring: {rounds} rounds; in each, the {first} and {second} models back "
                "to back per mode and concurrency ...",
                flush=True,
            )
            for r in range(rounds):
                arms = TRANSLATION_ARMS if r % 2 == 0 else TRANSLATION_ARMS[::-1]
                print(f" round {r + 1} of {rounds}", flush=True)
                for mode in modes:
                    expect = answer_fragments(mode)
                    for c in levels:
                        for api in arms:
                            label = translated_mode(mode, api)
                            driver.window(relay, label, c, duration, expect=expect)
            peak_kb = relay.peak_rss_kb()
            requests_total = relay.requests_total
            problems = dict(relay.problems)
        finally:
            if relay is not None:
                relay.stop()
    windows = driver.windows
    figures = paired(windows, modes, levels, TRANSLATION_ARMS, translated_mode)
    recorded = records(folder / "llmrelay" / "bench.db", [f"bench-{label}" for label in called])
    for mode in modes:
        tokens = "{}/{}".format(*tokens_of(mode))
        for api in TRANSLATION_ARMS:
            model = f"bench-{translated_mode(mode, api)}"
            seen = recorded.get(model, {})
            if set(seen.get("tokens", {})) != {tokens} or set(seen.get("status", {})) != {"200"}:
                problems[f"records of {model}"] = (
                    f"status {seen.get('status')}, tokens {seen.get('tokens')}; "
                    f"expected every request 200 and {tokens}"
                )
    targets = [
        Target(
            f"{second} / {first} req/s, {mode}, c={c}",
            v["throughput_ratio"] * 100,
            TARGET_PCT,
            "%",
            at_most=False,
            valid=v["valid"],
        )
        for mode, by_level in figures.items()
        for c, v in by_level.items()
    ]
    print()
    print_table(windows)
    print(f"\n{second} against {first} upstreams, medians of {rounds} rounds:")
    for mode, by_level in figures.items():
        for level, v in by_level.items():
            each = " ".join(f"{x:.3f}" for x in v["round_throughput_ratios"])
            rps, cpu = v["rps"], v["cpu_us_per_req"]
            print(
                f"  {mode:<5} c={level:<3} req/s {rps[first]:>7.0f} -> {rps[second]:>7.0f}"
                f"  x{v['throughput_ratio']:.3f} (rounds: {each})  CPU us/req "
                f"{cpu[first]:.0f} -> {cpu[second]:.0f}  x{v['cpu_ratio']:.3f} "
                f"({cpu[second] - cpu[first]:+.0f} us)" + ("" if v["valid"] else "  (ERRORS)")
            )
    print("\nrequest records per model (status: requests; prompt/completion tokens: requests):")
    for model, seen in recorded.items():
        print(
            f"  {model}: {seen['requests']} requests; status {seen['status']}; tokens "
            f"{seen['tokens']}; attempts > 1: {seen['attempts_over_1']}"
        )
    for mode, problem in problems.items():
        print(f"!! llmrelay {mode}: {problem}")
    print("\ntargets:")
    for t in targets:
        print(t.line())
    errors = sum(w.errors for w in windows)
    if errors:
        print(f"\n!! {errors} bad answers in total: windows with errors are not valid figures")
    return {
        "kind": "translation",
        "quick": quick,
        "machine": info,
        "modes": list(modes),
        "levels": levels,
        "arms": list(TRANSLATION_ARMS),
        "rounds": rounds,
        "window_s": duration,
        "windows": [asdict(w) for w in windows],
        "figures": figures,
        "records": recorded,
        "peak_rss_kb": peak_kb,
        "requests_total": requests_total,
        "problems": problems,
        "targets": [{**asdict(t), "met": t.met} for t in targets],
        "all_targets_met": all(t.met for t in targets),
        "errors": errors,
    }


def records(database: Path, models: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Recorded requests per model: by status, by token counts ("prompt/completion") and
    how many needed a second attempt. Both arms of a mode should read alike."""
    query = (
        "SELECT virtual_model, status_code, prompt_tokens, completion_tokens, count(*), "
        "sum(attempts > 1) FROM request_records "
        f"WHERE virtual_model IN ({', '.join('?' * len(models))}) "
        "GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
    )
    out: dict[str, dict[str, Any]] = {}
    with contextlib.closing(sqlite3.connect(database)) as db:
        for model, status, prompt, completion, count, again in db.execute(query, list(models)):
            seen = out.setdefault(
                str(model), {"requests": 0, "status": {}, "tokens": {}, "attempts_over_1": 0}
            )
            seen["requests"] += int(count)
            seen["status"][str(status)] = seen["status"].get(str(status), 0) + int(count)
            tokens = f"{prompt}/{completion}"
            seen["tokens"][tokens] = seen["tokens"].get(tokens, 0) + int(count)
            seen["attempts_over_1"] += int(again or 0)
    return out


def markdown(data: dict[str, Any]) -> str:
    """The figures of a translation results file as a Markdown table (docs/performance.md)."""
    first, second = data["arms"]
    out = [
        f"| mode | conc | {first} req/s | {second} req/s | throughput ratio | ratio per round "
        f"| {first} CPU us/req | {second} CPU us/req | CPU ratio | added CPU us/req "
        f"| p50 ms {first} / {second} | bad answers |",
        "|" + " --- |" * 12,
    ]
    for mode, by_level in data["figures"].items():
        for c, v in by_level.items():
            each = ", ".join(f"{x:.2f}" for x in v["round_throughput_ratios"])
            rps, cpu, p50 = v["rps"], v["cpu_us_per_req"], v["p50_ms"]
            bad = sum(v["bad_answers"].values())
            out.append(
                f"| {mode} | {c} | {rps[first]:.0f} | {rps[second]:.0f} "
                f"| {v['throughput_ratio']:.3f} | {each} | {cpu[first]:.0f} "
                f"| {cpu[second]:.0f} | {v['cpu_ratio']:.3f} | {cpu[second] - cpu[first]:+.0f} "
                f"| {p50[first]:.2f} / {p50[second]:.2f} "
                f"| {bad} of {sum(v['requests'].values())} |"
            )
    return "\n".join(out)
