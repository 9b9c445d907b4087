"""Benchmarks: llmrelay against a bare pass-through proxy on one mock upstream.

Run with `python -m bench.run` (see bench/run.py and docs/performance.md)."""
