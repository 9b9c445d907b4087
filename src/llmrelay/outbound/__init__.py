"""The outbound address policy: which addresses the gateway may connect to for a URL someone
configured (a provider's base URL, a webhook URL), by who configured it, and the HTTP
connector that enforces it when a connection is made. Imports only `settings` and aiohttp;
providers/, jobs/ and admin/ import it (docs/security.md, Outbound addresses)."""
