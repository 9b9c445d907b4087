"""The config snapshot: immutable data the request path reads instead of the database.

May import: store (to build), config.schema (enums). The gateway imports this package.
"""
