"""Persistence: SQLAlchemy models, engine set-up, migrations and credential crypto.

May import: settings. Never imports the gateway, admin or console packages.
"""
