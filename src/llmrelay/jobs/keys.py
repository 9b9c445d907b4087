"""The dedupe keys of the per-provider operations jobs: one live probe and one live discovery
per provider. Apart from the jobs themselves so the admin API's provider rules can name a
probe without importing what a probe calls."""

from __future__ import annotations


def probe_key(provider_id: str) -> str:
    return f"probe:{provider_id}"


def discovery_key(provider_id: str) -> str:
    return f"discover:{provider_id}"
