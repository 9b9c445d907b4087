"""The pages account mails link to (mail/links.py), open without a session: accept an
invitation (choose a password), reset a forgotten password (ask for a link; set a new
password), confirm an email address. The token arrives in the query string and is posted to
the admin API with the form; a GET never uses it up (mail scanners follow links)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from llmrelay.console.forms import FormState
from llmrelay.console.web import Console, client_for, page, read_form, render

#: What the sign-in page says after a link's page did its work (`/sign-in?done=...`).
DONE = {
    "invitation": "Your account is ready: sign in with your new password.",
    "reset": "Your password is changed: sign in with it.",
    "verified": "Your address is confirmed: sign in.",
}


def _token(request: Request) -> str:
    return request.query_params.get("token", "")[:200]


def _passwords(fields: dict[str, str], form: FormState) -> bool:
    if fields.get("password") != fields.get("confirm_password"):
        form.errors["confirm_password"] = "the two passwords differ"
        return False
    return True


async def accept_page(console: Console, request: Request) -> Response:
    return render(
        console,
        request,
        "account_link.html",
        kind="invitation",
        token=_token(request),
        form=FormState(),
    )


async def accept(console: Console, request: Request) -> Response:
    fields = await read_form(request)
    form = FormState(values={"name": fields.get("name", "")})
    token = fields.get("token", "")
    if _passwords(fields, form):
        body = {"token": token, "password": fields.get("password", "")}
        if fields.get("name", "").strip():
            body["name"] = fields["name"].strip()
        answer = await client_for(console, request).call(
            "POST", "/auth/invitation/accept", body=body
        )
        if answer.ok:
            return RedirectResponse("/sign-in?done=invitation", status_code=303)
        form = FormState.failed({"password": "", "name": fields.get("name", "")}, answer)
        status = answer.status
    else:
        status = 400
    return render(
        console, request, "account_link.html", status, kind="invitation", token=token, form=form
    )


async def forgot_page(console: Console, request: Request) -> Response:
    return render(console, request, "account_link.html", kind="forgot", token="", form=FormState())


async def forgot(console: Console, request: Request) -> Response:
    fields = await read_form(request)
    email = fields.get("email", "").strip()
    answer = await client_for(console, request).call(
        "POST", "/auth/password-reset", body={"email": email}
    )
    if answer.ok:
        return render(
            console,
            request,
            "account_link.html",
            kind="forgot",
            token="",
            form=FormState(),
            notice=answer.body.get("message"),
        )
    form = FormState.failed({"email": email}, answer)
    return render(
        console, request, "account_link.html", answer.status, kind="forgot", token="", form=form
    )


async def reset_page(console: Console, request: Request) -> Response:
    return render(
        console, request, "account_link.html", kind="reset", token=_token(request), form=FormState()
    )


async def reset(console: Console, request: Request) -> Response:
    fields = await read_form(request)
    form = FormState()
    token = fields.get("token", "")
    if _passwords(fields, form):
        answer = await client_for(console, request).call(
            "POST",
            "/auth/password-reset/confirm",
            body={"token": token, "password": fields.get("password", "")},
        )
        if answer.ok:
            return RedirectResponse("/sign-in?done=reset", status_code=303)
        form = FormState.failed({"password": ""}, answer)
        status = answer.status
    else:
        status = 400
    return render(
        console, request, "account_link.html", status, kind="reset", token=token, form=form
    )


async def verify_page(console: Console, request: Request) -> Response:
    return render(
        console,
        request,
        "account_link.html",
        kind="verify",
        token=_token(request),
        form=FormState(),
    )


async def verify(console: Console, request: Request) -> Response:
    fields = await read_form(request)
    token = fields.get("token", "")
    answer = await client_for(console, request).call(
        "POST", "/auth/verify-email", body={"token": token}
    )
    if answer.ok:
        return RedirectResponse("/sign-in?done=verified", status_code=303)
    return render(
        console,
        request,
        "account_link.html",
        answer.status,
        kind="verify",
        token=token,
        form=FormState(message=answer.message),
    )


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/accept-invitation", accept_page),
        page(console, "/accept-invitation", accept, ["POST"]),
        page(console, "/forgot-password", forgot_page),
        page(console, "/forgot-password", forgot, ["POST"]),
        page(console, "/reset-password", reset_page),
        page(console, "/reset-password", reset, ["POST"]),
        page(console, "/verify-email", verify_page),
        page(console, "/verify-email", verify, ["POST"]),
    ]
