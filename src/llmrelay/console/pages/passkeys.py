"""Passkeys in the console: adding, renaming and deleting one's own on the account page, and
signing in with one (password-less, or as the second step after a password). The browser's
half of each ceremony is static/passkeys.js; its answer arrives here as a form field and goes
to the admin API, which checks it."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console.forms import FormState
from llmrelay.console.pages.auth import account_values, answer_of
from llmrelay.console.web import Console, PageRefused, Visit, form_visit, page, see_other


async def _account(found: Visit, status: int, message: str) -> Response:
    values = await account_values(found, {})
    return found.render("account.html", status, form=FormState(message=message), **values)


async def add(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request)
    credential = answer_of(fields)
    if credential is None:
        return await _account(found, 400, "no passkey came back from the browser: try again")
    body = {"credential": credential, "name": fields.get("name", "").strip() or None}
    answer = await found.admin.call("POST", "/auth/passkeys", body=body)
    if not answer.ok:
        return await _account(found, answer.status, answer.message)
    handed: dict[str, Any] = {"notice": f"passkey {answer.body['name']!r} added"}
    if answer.body.get("recovery_codes"):
        handed["recovery_codes"] = answer.body["recovery_codes"]
    return see_other("/account", found, handed)


async def rename(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request)
    passkey_id = quote(request.path_params["passkey_id"], safe="")
    answer = await found.admin.call(
        "PATCH", f"/auth/passkeys/{passkey_id}", body={"name": fields.get("name", "").strip()}
    )
    if not answer.ok:
        return await _account(found, answer.status, answer.message)
    return see_other("/account", found, {"notice": "passkey renamed"})


async def delete(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request)
    passkey_id = quote(request.path_params["passkey_id"], safe="")
    answer = await found.admin.call("DELETE", f"/auth/passkeys/{passkey_id}")
    if not answer.ok and answer.status != 404:  # 404: already gone
        raise PageRefused(answer.status, answer.message, found)
    return see_other("/account", found, {"notice": "passkey deleted"})


def routes(console: Console) -> list[Route]:
    item = "/account/passkeys/{passkey_id}"
    return [
        page(console, "/account/passkeys", add, ["POST"]),
        page(console, item + "/rename", rename, ["POST"]),
        page(console, item + "/delete", delete, ["POST"]),
    ]
