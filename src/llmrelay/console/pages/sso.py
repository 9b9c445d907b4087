"""Single sign-on in the console: the sign-in page's "Sign in with ..." link starts a sign-in
at the identity provider (the admin API makes the URL and the sealed state, kept here in an
HttpOnly cookie while the browser is away), and the provider sends the browser back to
/sso/callback, which finishes it through the admin API and lands on the page asked for."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from llmrelay.console.base_url import public_base_url
from llmrelay.console.forms import FormState
from llmrelay.console.messages import plain
from llmrelay.console.pages.auth import _next, set_csrf_cookie
from llmrelay.console.web import Console, client_for, page, pass_cookies, render
from llmrelay.settings import Environment

SSO_COOKIE = "llmrelay_console_sso"
#: As long as the admin API keeps a sign-in's state.
SSO_S = 600


def callback_url(console: Console, request: Request) -> str:
    """Where the provider sends the browser back: LLMRELAY_PUBLIC_URL's /sso/callback (the
    address registered at the provider), else the address the browser used."""
    base = console.settings.public_url or public_base_url(request, console.settings.trusted_proxies)
    return f"{base}/sso/callback"


def _failed(console: Console, request: Request, message: str, status: int) -> Response:
    form = FormState(message=message)
    response = render(console, request, "sign_in.html", status, next="/dashboard", form=form)
    response.delete_cookie(SSO_COOKIE, path="/sso", httponly=True, samesite="lax")
    return response


async def start(console: Console, request: Request) -> Response:
    next_path = _next(request.query_params.get("next"))
    admin = client_for(console, request)
    answer = await admin.call(
        "POST",
        "/auth/sso/begin",
        body={"redirect_uri": callback_url(console, request), "next": next_path},
    )
    if not answer.ok:
        return _failed(
            console, request, answer.message, answer.status if answer.status < 500 else 502
        )
    response = RedirectResponse(str(answer.body["authorize_url"]), status_code=303)
    response.set_cookie(
        SSO_COOKIE,
        str(answer.body["pending"]),
        max_age=SSO_S,
        path="/sso",
        secure=console.settings.env is Environment.PRODUCTION,
        httponly=True,
        samesite="lax",  # sent on the provider's top-level redirect back here
    )
    return response


async def callback(console: Console, request: Request) -> Response:
    params = request.query_params
    if params.get("error"):
        said = params.get("error_description") or params["error"]
        return _failed(console, request, f"the identity provider refused: {said[:200]}", 401)
    pending = request.cookies.get(SSO_COOKIE, "")
    if not pending:
        return _failed(console, request, "this sign-in was not started here: start again", 400)
    admin = client_for(console, request)
    answer = await admin.call(
        "POST",
        "/auth/sso/finish",
        body={
            "code": params.get("code", ""),
            "state": params.get("state", ""),
            "pending": pending,
        },
    )
    if not answer.ok:
        status = answer.status if answer.status in (400, 401, 403) else 502
        return _failed(console, request, plain(answer.message), status)
    response = RedirectResponse(_next(answer.header("x-llmrelay-next")), status_code=303)
    pass_cookies(response, admin)
    set_csrf_cookie(console, response, str(answer.body["csrf_token"]))
    response.delete_cookie(SSO_COOKIE, path="/sso", httponly=True, samesite="lax")
    return response


def routes(console: Console) -> list[Route]:
    return [
        page(console, "/sso/start", start),
        page(console, "/sso/callback", callback),
    ]
