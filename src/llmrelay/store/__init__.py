"""Persistence: SQLAlchemy models, engine set-up, migrations, credential crypto, the hourly
usage rollups and record retention.

May import: settings. Never imports the gateway, admin or console packages.
"""
