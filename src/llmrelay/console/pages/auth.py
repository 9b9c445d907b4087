"""Signing in (password, then a TOTP code, a passkey or a recovery code when the account has
two-factor; or a passkey alone), signing out, and the user's own account: password,
sessions and two-factor setup (passkeys themselves: pages/passkeys.py)."""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import quote

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from llmrelay.console import flash
from llmrelay.console.admin_client import AdminClient
from llmrelay.console.forms import FormState
from llmrelay.console.messages import plain
from llmrelay.console.pages.accounts import DONE
from llmrelay.console.qr import totp_qr
from llmrelay.console.web import (
    CSRF_COOKIE,
    CSRF_FIELD,
    Console,
    PageRefused,
    Visit,
    client_for,
    form_visit,
    page,
    pass_cookies,
    read_form,
    render,
    see_other,
    visit,
)
from llmrelay.settings import Environment
from llmrelay.store.crypto import CredentialError

#: How long the TOTP step of a sign-in may take (its sealed state expires then).
STEP_S = 300
_STEP_CONTEXT = "console.sign-in"


#: A path of this site: no scheme, no `//host`, no backslash, control character or space
#: (browsers drop tabs and new lines from URLs, so `/\t/evil.example` would become `//...`).
_LOCAL_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9\-._~!$&'()*+,;=:@%/?]*")


def _next(value: str | None) -> str:
    """Where to go after signing in: only a path of this site (no open redirect)."""
    if value and _LOCAL_PATH.fullmatch(value):
        return value
    return "/dashboard"


def _seal(console: Console, email: str, password: str) -> str:
    sealer = console.sealer()
    if sealer is None:
        return ""
    plain = orjson.dumps({"e": email, "p": password, "x": time.time() + STEP_S})
    return sealer.seal(plain, context=_STEP_CONTEXT)


def _open(console: Console, sealed: str) -> tuple[str, str] | None:
    """The email and password of a sign-in's first step, while it is fresh. The password
    travels sealed (AES-GCM under LLMRELAY_SECRET_KEY), so any replica can finish the step
    and the page never holds it in the clear."""
    sealer = console.sealer()
    if sealer is None or not sealed:
        return None
    try:
        found: dict[str, Any] = orjson.loads(sealer.open(sealed, context=_STEP_CONTEXT))
    except (CredentialError, orjson.JSONDecodeError, ValueError):
        return None
    if float(found.get("x", 0)) < time.time():
        return None
    return str(found["e"]), str(found["p"])


def set_csrf_cookie(console: Console, response: Response, token: str) -> None:
    settings = console.settings
    response.set_cookie(
        CSRF_COOKIE,
        token,
        max_age=int(settings.session_absolute_s),
        path="/",
        secure=settings.env is Environment.PRODUCTION,
        httponly=True,
        samesite="lax",
    )


async def sso_name(console: Console, request: Request) -> str | None:
    """The single sign-on button's name, when the admin API has single sign-on on."""
    answer = await client_for(console, request).get("/auth/sso")
    return str(answer.body["name"]) if answer.ok and answer.body.get("enabled") else None


async def sign_in_page(console: Console, request: Request) -> Response:
    return render(
        console,
        request,
        "sign_in.html",
        next=_next(request.query_params.get("next")),
        form=FormState(),
        done=DONE.get(request.query_params.get("done", "")),
        sso=await sso_name(console, request),
    )


async def sign_in(console: Console, request: Request) -> Response:
    fields = await read_form(request)
    next_path = _next(fields.get("next"))
    pending = fields.get("pending", "")
    # The input of a form sent after the session ended (web._signed_out), sealed: kept
    # through both steps, then shown on /resume to be sent again.
    draft = fields.get("draft", "")
    if flash.unseal(console.sealer(), draft) is None:
        draft = ""
    if pending:
        opened = _open(console, pending)
        if opened is None:
            form = FormState(message="the sign-in took too long: start again")
            return render(
                console, request, "sign_in.html", 400, next=next_path, form=form, draft=draft
            )
        email, password = opened
    else:
        email, password = fields.get("email", "").strip(), fields.get("password", "")
    body: dict[str, Any] = {"email": email, "password": password}
    passkey = answer_of(fields, "passkey")
    if passkey is not None:
        body["passkey"] = passkey
    if fields.get("totp_code", "").strip():
        body["totp_code"] = fields["totp_code"].strip()
    if fields.get("recovery_code", "").strip():
        body["recovery_code"] = fields["recovery_code"].strip()
    admin = client_for(console, request)
    answer = await admin.call("POST", "/auth/login", body=body)
    if answer.ok:
        return _signed_in(console, admin, answer.body, next_path, draft)
    if answer.error.get("type") == "totp_required" or (pending and answer.status in (400, 401)):
        step = FormState(message=answer.message if pending else None)
        return render(
            console,
            request,
            "sign_in_totp.html",
            answer.status if pending else 200,
            next=next_path,
            pending=_seal(console, email, password),
            form=step,
            draft=draft,
            passkey_options=await second_step_options(admin, email, password),
        )
    form = FormState(values={"email": email}, message=answer.message)
    status = answer.status if answer.status in (400, 401, 403, 429) else 502
    response = render(
        console, request, "sign_in.html", status, next=next_path, form=form, draft=draft
    )
    if answer.header("retry-after"):
        response.headers["retry-after"] = answer.header("retry-after") or ""
    return response


def _signed_in(
    console: Console, admin: AdminClient, session: dict[str, Any], next_path: str, draft: str
) -> Response:
    """To where the sign-in was going, with the new session's cookies (and a form's draft to
    send again, on /resume)."""
    redirect = RedirectResponse("/resume" if draft else next_path, status_code=303)
    pass_cookies(redirect, admin)
    set_csrf_cookie(console, redirect, str(session["csrf_token"]))
    if draft:  # the sealed draft itself is the flash for /resume
        redirect.set_cookie(
            flash.FLASH_COOKIE,
            draft,
            max_age=flash.DRAFT_S,
            path="/",
            secure=console.settings.env is Environment.PRODUCTION,
            httponly=True,
            samesite="lax",
        )
    return redirect


def answer_of(fields: dict[str, str], name: str = "credential") -> dict[str, Any] | None:
    """The authenticator's answer (JSON) a passkey form carries (static/passkeys.js), or
    None (no JavaScript, nothing chosen)."""
    try:
        found = orjson.loads(fields.get(name, "") or "null")
    except orjson.JSONDecodeError:
        return None
    return found if isinstance(found, dict) else None


async def second_step_options(admin: AdminClient, email: str, password: str) -> str | None:
    """The options (JSON) for the account's passkeys as its second factor, or None when it
    has none (or this gateway has no LLMRELAY_PUBLIC_URL for passkeys)."""
    answer = await admin.call(
        "POST", "/auth/passkeys/login/options", body={"email": email, "password": password}
    )
    return orjson.dumps(answer.body).decode() if answer.ok else None


async def sign_in_with_passkey(console: Console, request: Request) -> Response:
    """A password-less sign-in: the passkey's answer to options static/passkeys.js asked
    the admin API for."""
    fields = await read_form(request)
    next_path = _next(fields.get("next"))
    credential = answer_of(fields)
    admin = client_for(console, request)
    answer = None
    if credential is not None:
        answer = await admin.call("POST", "/auth/passkeys/login", body={"credential": credential})
        if answer.ok:
            return _signed_in(console, admin, answer.body, next_path, "")
    form = FormState(message="no passkey came back from the browser: try again")
    status = 400
    if answer is not None:
        form = FormState(message=answer.message)
        status = answer.status if answer.status in (400, 401, 403, 409, 429) else 502
    return render(
        console,
        request,
        "sign_in.html",
        status,
        next=next_path,
        form=form,
        sso=await sso_name(console, request),
    )


async def sign_out(console: Console, request: Request) -> Response:
    fields = await read_form(request)
    admin = client_for(console, request, fields.get(CSRF_FIELD, ""))
    answer = await admin.call("POST", "/auth/logout")
    if not answer.ok and answer.status != 401:  # 401: already ended; else it still lives
        raise PageRefused(answer.status, answer.message)
    response = RedirectResponse("/sign-in", status_code=303)
    pass_cookies(response, admin)
    response.delete_cookie(CSRF_COOKIE, path="/", httponly=True, samesite="lax")
    return response


#: Fields whose value the resume page shows masked (still sent again as typed).
_SECRET_HINTS = ("password", "secret", "api_key", "code", "token")


async def resume(console: Console, request: Request) -> Response:
    """The input of a form that reached an ended session, after signing in again: shown to
    check, and sent again with one button (with this session's CSRF token)."""
    found = await visit(console, request)
    draft = found.take_flash()
    if not draft or not isinstance(draft.get("fields"), dict):
        return see_other("/dashboard", found)
    fields = {str(k): str(v) for k, v in draft["fields"].items()}
    shown = [
        (name, "••••••" if any(h in name for h in _SECRET_HINTS) and value else value)
        for name, value in fields.items()
        if name not in ("version", "etag")
    ]
    return found.render(
        "resume.html", action=_next(str(draft.get("action", ""))), fields=fields, shown=shown
    )


async def account_values(found: Visit, handed: dict[str, Any]) -> dict[str, Any]:
    """What the account page shows besides its forms: sessions, passkeys, and what the form
    whose redirect led here handed to it."""
    setup = handed.get("setup")
    listed = await found.admin.get("/auth/sessions")
    keys = await found.admin.get("/auth/passkeys")
    return {
        "notice": handed.get("notice"),
        "setup": setup,
        "qr": totp_qr(str(setup.get("otpauth_uri", ""))) if isinstance(setup, dict) else None,
        "recovery_codes": handed.get("recovery_codes"),
        "sessions": listed.data,
        "passkeys": keys.data,
    }


async def account(console: Console, request: Request) -> Response:
    found = await visit(console, request)
    values = await account_values(found, found.take_flash() or {})
    return found.render("account.html", form=FormState(), **values)


async def end_session(console: Console, request: Request) -> Response:
    """End one of my sessions (another browser); ending this one signs out."""
    found, _ = await form_visit(console, request)
    session_id = request.path_params["session_id"]
    answer = await found.admin.call("DELETE", f"/auth/sessions/{quote(session_id, safe='')}")
    if not answer.ok and answer.status != 404:  # 404: already ended
        raise PageRefused(answer.status, answer.message)
    return see_other("/account", found, {"notice": "session ended"})


async def end_other_sessions(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request)
    answer = await found.admin.call("POST", "/auth/sessions/revoke-others")
    if not answer.ok:
        raise PageRefused(answer.status, answer.message)
    ended = int(answer.body.get("revoked", 0))
    return see_other("/account", found, {"notice": f"{ended} other session(s) ended"})


async def change_password(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, temporary_ok=True)
    # a temporary password's change comes from (and fails back to) the change form alone
    template = "password_change.html" if found.me.get("password_change_required") else None
    template = template or "account.html"
    form = FormState()
    if fields.get("new_password") != fields.get("confirm_password"):
        form.errors["confirm_password"] = "the two new passwords differ"
        return found.render(template, 400, form=form)
    answer = await found.admin.call(
        "POST",
        "/auth/password",
        body={
            "current_password": fields.get("current_password", ""),
            "new_password": fields.get("new_password", ""),
        },
    )
    if not answer.ok:
        failed = FormState.failed({"current_password": "", "new_password": ""}, answer)
        return found.render(template, answer.status, form=failed)
    response = see_other("/account", found, {"notice": "password changed"})
    set_csrf_cookie(console, response, str(answer.body["csrf_token"]))
    return response


async def totp_setup(console: Console, request: Request) -> Response:
    found, _ = await form_visit(console, request)
    answer = await found.admin.call("POST", "/auth/totp/setup")
    if not answer.ok:
        return found.render("account.html", answer.status, form=FormState(message=answer.message))
    setup = {n: answer.body.get(n) for n in ("secret", "otpauth_uri")}
    return see_other("/account", found, {"setup": setup})


async def totp_enable(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request)
    answer = await found.admin.call(
        "POST", "/auth/totp/enable", body={"code": fields.get("code", "").strip()}
    )
    if not answer.ok:
        setup = {"secret": fields.get("secret", ""), "otpauth_uri": fields.get("otpauth_uri", "")}
        form = FormState(errors={"code": plain(answer.message)})
        return found.render(
            "account.html", answer.status, form=form, setup=setup, qr=totp_qr(setup["otpauth_uri"])
        )
    return see_other("/account", found, {"recovery_codes": answer.body["recovery_codes"]})


async def totp_disable(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request)
    body = {"password": fields.get("password", "")}
    code = fields.get("code", "").strip()
    body["code" if code.isdigit() else "recovery_code"] = code
    answer = await found.admin.call("POST", "/auth/totp/disable", body=body)
    if not answer.ok:
        return found.render("account.html", answer.status, form=FormState(message=answer.message))
    return see_other("/account", found, {"notice": "two-factor is off"})


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/sign-in", sign_in_page),
        page(console, "/sign-in", sign_in, ["POST"]),
        page(console, "/sign-in/passkey", sign_in_with_passkey, ["POST"]),
        page(console, "/sign-out", sign_out, ["POST"]),
        page(console, "/resume", resume),
        page(console, "/account", account),
        page(console, "/account/password", change_password, ["POST"]),
        page(console, "/account/sessions/others", end_other_sessions, ["POST"]),
        page(console, "/account/sessions/{session_id}/end", end_session, ["POST"]),
        page(console, "/account/totp/setup", totp_setup, ["POST"]),
        page(console, "/account/totp/enable", totp_enable, ["POST"]),
        page(console, "/account/totp/disable", totp_disable, ["POST"]),
    ]
