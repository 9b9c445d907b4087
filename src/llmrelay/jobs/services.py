"""What the process offers the jobs it runs: settings, the database, the sealer, the data
plane's dispatcher (a job that calls a model goes through the same admission, routing,
metering and recording as a served request) and the provider registry (probes and discovery
call providers through its transports)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from llmrelay.gateway.dispatch import Dispatcher
from llmrelay.providers.registry import ProviderRegistry
from llmrelay.settings import Settings
from llmrelay.snapshot.signals import ConfigPublisher
from llmrelay.store.crypto import Sealer


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    engine: AsyncEngine
    sealer: Sealer
    dispatcher: Dispatcher
    registry: ProviderRegistry
    #: Announces a config generation a job bumped (a provider's health changed routing,
    #: prices synced) to every replica; None: they see it at their next poll.
    publisher: ConfigPublisher | None = None
    #: Looks for due jobs now (a job queued a follow-up to run at once).
    wake: Callable[[], None] | None = None
    #: Told a provider's id when its health probe finds it online: this process's circuit
    #: breakers of its routes close (gateway/trials.py).
    provider_online: Callable[[str], None] | None = None
