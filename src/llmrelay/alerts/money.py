"""Amounts as an alert mail shows them."""

from __future__ import annotations


def usd(micros: int) -> str:
    """Micro-USD as dollars with cents (more digits only when cents would hide the amount)."""
    value = micros / 1_000_000
    if micros and abs(value) < 0.01:
        return f"${value:,.6f}".rstrip("0")
    return f"${value:,.2f}"
