"""The console roles, alone: the SSO role map (admin/sso/config.py) is read when every serving
process starts, and importing it from admin/access.py would load FastAPI (about 5 MiB of
resident memory) into a process whose admin API may never be called."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    PLATFORM_ADMIN = "platform_admin"
    TENANT_ADMIN = "tenant_admin"
    DEVELOPER = "developer"
    BILLING = "billing"
    VIEWER = "viewer"
    AUDITOR = "auditor"
