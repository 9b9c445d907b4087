"""Declarative configuration: the YAML file, its validation, and applying it to the store.

May import: store, apikeys, settings. Used by the CLI (`apply`, `serve --config`, `--demo`).
"""
