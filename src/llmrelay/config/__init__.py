"""Declarative configuration: the YAML file, its validation, and applying it to the store.

May import: store, apikeys, settings, and the admin API's domain services
(`admin/<domain>/service.py` and `repository.py`; `admin/kit/` problems, rows, lookups,
pages): apply writes through the same rules as the API, and those modules import no web
framework. Used by the CLI (`apply`, `serve --config`, `--demo`).
"""
