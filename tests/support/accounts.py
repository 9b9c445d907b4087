"""Accounts made through the admin API for tests that then sign in as them: a password an
admin sets is temporary (the user must change it first: docs/accounts.md), so the account
is made with a throw-away password and its first sign-in changes it to the one wanted."""

from __future__ import annotations

from typing import Any

import httpx


def make_account(admin: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    """POST /users with `body` (through `admin`, the admin token's client); the user's own
    first password change then sets `body["password"]`. The creation's answer."""
    wanted = str(body["password"])
    temporary = f"temporary {wanted}"
    made = admin.post("/users", json=body | {"password": temporary})
    if made.status_code != 201:
        return made
    with httpx.Client(base_url=str(admin.base_url), timeout=admin.timeout) as user:
        signed_in = user.post("/auth/login", json={"email": body["email"], "password": temporary})
        assert signed_in.status_code == 200, signed_in.text
        assert signed_in.json()["password_change_required"] is True
        changed = user.post(
            "/auth/password",
            json={"current_password": temporary, "new_password": wanted},
            headers={"X-CSRF-Token": signed_in.json()["csrf_token"]},
        )
        assert changed.status_code == 200, changed.text
        ended = user.post("/auth/logout", headers={"X-CSRF-Token": changed.json()["csrf_token"]})
        assert ended.status_code == 204, ended.text  # no session left behind
    return made
