"""Logs, metrics, health and traces: how operators see the gateway.

May import: settings, snapshot (holder state). Imported by the gateway and app assembly.
"""
