"""Provider adapters and the transports that carry their requests.

An adapter turns a gateway call into an upstream HTTP request for one provider type; a
transport sends it (aiohttp for real providers, in-process for the built-in mock).
Transport failures are mapped to the errors in providers/errors.py here and nowhere else.
May import: snapshot (records), protocols, outbound (the address policy its connector
enforces). Never imports gateway, admin or console.
"""
