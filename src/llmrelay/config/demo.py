"""`serve --demo`: the built-in mock provider, models `demo` and `demo-embedding`, a demo key.

The demo key is generated once and kept beside the database (mode 0600) so every
`serve --demo` can print it again; only its digest is in the database.
"""

from __future__ import annotations

from pathlib import Path

from llmrelay import apikeys
from llmrelay.config.schema import (
    GatewayConfig,
    KeyConfig,
    ModelConfig,
    ProjectConfig,
    ProviderConfig,
    ProviderType,
    RouteConfig,
)

DEMO_PROVIDER = "demo-mock"
DEMO_MODEL = "demo"
DEMO_EMBEDDING_MODEL = "demo-embedding"
DEMO_PROJECT = "demo"


def demo_key(key_file: Path) -> str:
    if key_file.exists():
        return key_file.read_text().strip()
    key = apikeys.generate_key()
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.touch(mode=0o600)
    key_file.write_text(key + "\n")
    return key


def demo_config(key: str) -> GatewayConfig:
    return GatewayConfig(
        providers=[ProviderConfig(slug=DEMO_PROVIDER, type=ProviderType.MOCK)],
        models=[
            ModelConfig(
                name=DEMO_MODEL,
                routes=[RouteConfig(provider=DEMO_PROVIDER, upstream_model="mock-chat")],
            ),
            ModelConfig(
                name=DEMO_EMBEDDING_MODEL,
                embedding=True,
                routes=[RouteConfig(provider=DEMO_PROVIDER, upstream_model="mock-embedding")],
            ),
        ],
        projects=[
            ProjectConfig(name=DEMO_PROJECT, keys=[KeyConfig(name="demo", key=key)]),
        ],
    )
