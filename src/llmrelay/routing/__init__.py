"""Choosing routes for an attempt: selection strategies and per-route circuit breakers.

May import: snapshot. The gateway imports this package; it imports nothing from the gateway.
"""
