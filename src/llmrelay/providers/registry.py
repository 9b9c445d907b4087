"""Provider type -> adapter and transport. Adding a provider is a module and a line here."""

from __future__ import annotations

from collections.abc import Callable

from llmrelay.providers.anthropic import AnthropicAdapter
from llmrelay.providers.azure import AzureOpenAIAdapter
from llmrelay.providers.base import Adapter, Transport
from llmrelay.providers.codex.accounts import CodexAccounts
from llmrelay.providers.codex.adapter import OpenAICodexAdapter
from llmrelay.providers.codex.transport import CodexTransport
from llmrelay.providers.gemini import GeminiAdapter
from llmrelay.providers.http import HttpTransport
from llmrelay.providers.mock import MockAdapter, MockTransport
from llmrelay.providers.openai import OpenAIAdapter


class UnsupportedProvider(LookupError):
    """The provider's type has no adapter in this version."""


class ProviderRegistry:
    def __init__(self, http: HttpTransport, codex: CodexAccounts | None = None) -> None:
        self.http = http
        #: The openai_codex providers' accounts (None: this process serves none; stack.py).
        self.codex = codex
        openai = OpenAIAdapter()
        self._adapters: dict[str, Adapter] = {
            "openai": openai,
            "openai_compatible": openai,
            "azure_openai": AzureOpenAIAdapter(),
            "anthropic": AnthropicAdapter(),
            "gemini": GeminiAdapter(),
            "mock": MockAdapter(),
        }
        self._transports: dict[str, Transport] = {"mock": MockTransport()}
        if codex is not None:
            self._adapters["openai_codex"] = OpenAICodexAdapter()
            self._transports["openai_codex"] = CodexTransport(http, codex)

    def adapter(self, provider_type: str) -> Adapter:
        try:
            return self._adapters[provider_type]
        except KeyError:
            raise UnsupportedProvider(
                f"provider type {provider_type!r} is not supported yet"
            ) from None

    def transport(self, provider_type: str) -> Transport:
        return self._transports.get(provider_type, self.http)

    def wrapped(
        self,
        adapter: Callable[[Adapter], Adapter],
        transport: Callable[[Transport], Transport],
    ) -> ProviderRegistry:
        """This registry with each adapter and transport wrapped, sharing its adapters and
        connection pool: one headless call's hooks (gateway/headless.py). Never closed."""
        view = ProviderRegistry(self.http)
        view.codex = self.codex
        view._adapters = {name: adapter(found) for name, found in self._adapters.items()}
        view._transports = {name: transport(self.transport(name)) for name in self._adapters}
        return view

    async def close(self) -> None:
        if self.codex is not None:
            await self.codex.close()
        await self.http.close()
