"""Admission limits: rpm, tpm, concurrency and monthly budgets (see base.py)."""
