"""Persistence: SQLAlchemy models, engine set-up, migrations, credential crypto, the hourly
usage rollups, record retention and the monthly record partitions (PostgreSQL).

May import: settings. Never imports the gateway, admin or console packages.
"""
