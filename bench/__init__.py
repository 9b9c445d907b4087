"""Benchmarks: llmrelay against a bare pass-through proxy on the same mock upstream (python -m bench.run)."""
