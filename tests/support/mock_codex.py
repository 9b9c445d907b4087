"""A stand-in for ChatGPT's OAuth issuer and its Codex backend, written from the public Codex
CLI's protocol (docs/codex.md), served on loopback (aiohttp, its own thread).

Issuer (`issuer`): `GET /oauth/authorize` approves at once for `person` and redirects to the
client's redirect URI with a code (as for a user already signed in); `POST /oauth/token`
exchanges a code (PKCE S256 checked, the client id and redirect URI must match the
authorization's) or a refresh token (single use: a spent one is refused with
`refresh_token_reused`); the device code flow at `/api/accounts/deviceauth/usercode` and
`/deviceauth/token` (403 until the test calls `approve(user_code)`).

Several accounts: `signing_in(account_id, email)` makes the next sign-ins those of another
ChatGPT account (each token stays its own account's: refreshes keep the account and its
email), and `used_by[account_id]` sets one account's usage apart from `used_percent`.

Backend (`backend`, `.../backend-api/codex`): `POST /responses` (a stream only, `store`
false, as the real one insists), `POST /responses/compact`, `GET /models`, and
`GET /backend-api/wham/usage`. Every call needs a bearer access token this server issued and
not yet expired or revoked, and the `chatgpt-account-id` of that token's account. Answers
carry the x-codex-* usage headers of `used_percent`; at 100 % a call is refused with 429
`usage_limit_reached` until `resets_at`.

What `/responses` answers: by default the last user text, echoed; with `scripted` set, what
the agent tests' scripted model decides (tests/support/agent_script.py, written as
agent_responses.py streams it): a call of the client's own shell tool, then the final answer
quoting its result, so that a real coding agent (the Codex CLI) runs its tool loop here.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson
from aiohttp import web

from tests.support import agent_responses
from tests.support.agent_script import decide, summary
from tests.support.background_app import BackgroundApp
from tests.support.mock_responses import _input_text, _response
from tests.support.ports import free_port

CLIENT_ID = "app_EMoamEEZ73f0CkXaXp7hrann"
#: The image the stand-in draws: a 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
_SEQUENCE = itertools.count(1)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: dict[str, Any]) -> str:
    """An (unsigned, as far as its readers care) JWT with these claims."""
    header = _b64(orjson.dumps({"alg": "none", "typ": "JWT"}))
    return f"{header}.{_b64(orjson.dumps(claims))}.{_b64(secrets.token_bytes(8))}"


@dataclass
class Issued:
    account_id: str
    expires_at: float


@dataclass
class MockCodex:
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    #: Who signs in: the id token's claims.
    account_id: str = "acct-codex-1"
    email: str = "codex@example.com"
    plan_type: str = "pro"
    #: How long an access token lives (seconds).
    token_ttl_s: float = 3600.0
    #: The account's primary window: share used, and when it resets (Unix seconds).
    used_percent: float = 12.5
    resets_at: float = field(default_factory=lambda: time.time() + 3600)
    #: What the tests read: backend calls (path, headers, body), token grants by type.
    calls: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    grants: list[str] = field(default_factory=list)
    #: The accounts whose tokens were refreshed, in order.
    refreshed: list[str] = field(default_factory=list)
    #: How long the token endpoint takes to answer (a slow issuer: overlapping refreshes).
    token_delay_s: float = 0.0
    #: Per account: its primary window's share used (else `used_percent`).
    used_by: dict[str, float] = field(default_factory=dict)
    #: Answer `/responses` as the agent tests' scripted model (see the module's docstring).
    scripted: bool = False
    #: With `scripted`: what each `/responses` call was answered (agent_script.summary).
    answers: list[str] = field(default_factory=list)
    _people: dict[str, tuple[str, str]] = field(default_factory=dict)  # account -> email, plan
    _access: dict[str, Issued] = field(default_factory=dict)
    _refresh: dict[str, str] = field(default_factory=dict)  # refresh token -> account
    _spent: set[str] = field(default_factory=set)
    _codes: dict[str, dict[str, str]] = field(default_factory=dict)
    _devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    _served: BackgroundApp = field(default_factory=lambda: BackgroundApp("mock-codex"))

    @property
    def issuer(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def backend(self) -> str:
        return f"{self.issuer}/backend-api/codex"

    def start(self) -> MockCodex:
        self._served.start(self._app(), self.host, self.port)
        return self

    def stop(self) -> None:
        self._served.stop()

    # -- what tests do -----------------------------------------------------------------

    def tokens(self) -> dict[str, str]:
        """Tokens as a finished sign-in would give them (for tests that skip the flows)."""
        return self._issue(self.account_id)

    def signing_in(self, account_id: str, email: str) -> None:
        """The next sign-ins are this account's."""
        self.account_id = account_id
        self.email = email

    def used(self, account_id: str) -> float:
        return self.used_by.get(account_id, self.used_percent)

    def approve(self, user_code: str) -> None:
        """The user typed the device code and approved."""
        for device in self._devices.values():
            if device["user_code"] == user_code:
                device["approved"] = True
                return
        raise KeyError(user_code)

    def revoke_access_tokens(self) -> None:
        """Every access token stops working (signed out elsewhere); refresh tokens stay."""
        self._access.clear()

    def revoke_refresh_tokens(self) -> None:
        """Every refresh token stops working (the account signed out everywhere)."""
        self._refresh.clear()

    def backend_calls(self, suffix: str) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
        return [call for call in self.calls if call[0].endswith(suffix)]

    def holder(self, access_token: str) -> str | None:
        """The account this server issued `access_token` to (None: never issued, or
        revoked)."""
        issued = self._access.get(access_token)
        return None if issued is None else issued.account_id

    # -- the issuer --------------------------------------------------------------------

    def _issue(self, account: str) -> dict[str, str]:
        now = time.time()
        access = jwt({"exp": int(now + self.token_ttl_s), "jti": secrets.token_hex(8)})
        self._access[access] = Issued(account, now + self.token_ttl_s)
        refresh = "rt_" + secrets.token_urlsafe(24)
        self._refresh[refresh] = account
        email, plan = self._people.setdefault(account, (self.email, self.plan_type))
        id_token = jwt(
            {
                "email": email,
                "exp": int(now + 3600),
                "https://api.openai.com/auth": {
                    "chatgpt_account_id": account,
                    "chatgpt_plan_type": plan,
                },
            }
        )
        return {"access_token": access, "refresh_token": refresh, "id_token": id_token}

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("client_id") != CLIENT_ID or query.get("code_challenge_method") != "S256":
            return web.Response(status=400, text="bad client or PKCE method")
        code = "code_" + secrets.token_urlsafe(16)
        self._codes[code] = {
            "redirect_uri": query["redirect_uri"],
            "challenge": query["code_challenge"],
        }
        target = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
        raise web.HTTPFound(target)

    async def _token(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        grant = str(form.get("grant_type"))
        self.grants.append(grant)
        if self.token_delay_s:
            await asyncio.sleep(self.token_delay_s)
        if form.get("client_id") != CLIENT_ID:
            return _oauth_error(401, "invalid_client")
        if grant == "authorization_code":
            found = self._codes.pop(str(form.get("code")), None)
            if found is None or found["redirect_uri"] != form.get("redirect_uri"):
                return _oauth_error(400, "invalid_grant")
            verifier = str(form.get("code_verifier"))
            if _b64(hashlib.sha256(verifier.encode()).digest()) != found["challenge"]:
                return _oauth_error(400, "invalid_grant")
            return web.json_response(self._issue(self.account_id))
        if grant == "refresh_token":
            token = str(form.get("refresh_token"))
            if token in self._spent:
                return _oauth_error(401, "refresh_token_reused")
            account = self._refresh.pop(token, None)
            if account is None:
                return _oauth_error(401, "refresh_token_invalidated")
            self._spent.add(token)
            self.refreshed.append(account)
            return web.json_response(self._issue(account))
        return _oauth_error(400, "unsupported_grant_type")

    async def _device_start(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("client_id") != CLIENT_ID:
            return web.Response(status=400)
        device_id = "dev_" + secrets.token_hex(8)
        user_code = f"{secrets.randbelow(10_000):04d}-{secrets.randbelow(10_000):04d}"
        self._devices[device_id] = {"user_code": user_code, "approved": False}
        return web.json_response(
            {"device_auth_id": device_id, "user_code": user_code, "interval": "1"}
        )

    async def _device_poll(self, request: web.Request) -> web.Response:
        body = await request.json()
        device = self._devices.get(body.get("device_auth_id"))
        if device is None or device["user_code"] != body.get("user_code"):
            return web.Response(status=404)
        if not device["approved"]:
            return web.Response(status=403)
        verifier = secrets.token_urlsafe(48)
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        code = "code_" + secrets.token_urlsafe(16)
        self._codes[code] = {
            "redirect_uri": f"{self.issuer}/deviceauth/callback",
            "challenge": challenge,
        }
        del self._devices[body["device_auth_id"]]
        return web.json_response(
            {"authorization_code": code, "code_challenge": challenge, "code_verifier": verifier}
        )

    # -- the backend -------------------------------------------------------------------

    def _check(self, request: web.Request) -> web.Response | None:
        """What the backend checks of every call: a live token and its account."""
        bearer = request.headers.get("authorization", "")
        issued = self._access.get(bearer.removeprefix("Bearer "))
        if issued is None or issued.expires_at <= time.time():
            return _backend_error(401, "invalid_token", "token expired or unknown")
        if request.headers.get("chatgpt-account-id") != issued.account_id:
            return _backend_error(403, "account_mismatch", "chatgpt-account-id mismatch")
        return None

    def _caller(self, request: web.Request) -> str:
        """The account of a call `_check` let through."""
        return request.headers.get("chatgpt-account-id", "")

    def _usage_headers(self, account: str = "") -> dict[str, str]:
        return {
            "x-codex-primary-used-percent": f"{self.used(account):g}",
            "x-codex-primary-window-minutes": "300",
            "x-codex-primary-reset-at": str(int(self.resets_at)),
            "x-codex-secondary-used-percent": "3",
            "x-codex-secondary-window-minutes": "10080",
            "x-codex-secondary-reset-after-seconds": "86400",
        }

    async def _record(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        body = orjson.loads(raw) if raw else {}
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.calls.append((request.path_qs, headers, body))
        return body if isinstance(body, dict) else {}

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        refused = self._check(request)
        if refused is not None:
            return refused
        if body.get("stream") is not True:
            return _backend_error(400, "invalid_request_error", "Stream must be set to true")
        if body.get("store") is not False:
            return _backend_error(400, "invalid_request_error", "Store must be set to false")
        account = self._caller(request)
        if self.used(account) >= 100:
            error = {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "plan_type": self.plan_type,
                "resets_at": int(self.resets_at),
            }
            headers = self._usage_headers(account)
            return web.json_response({"error": error}, status=429, headers=headers)
        model = str(body.get("model"))
        if self.scripted:
            return await self._scripted(request, body, model, account)
        response_id = f"resp_codex{next(_SEQUENCE):06d}"
        text = _input_text(body.get("input"))
        done = _response(response_id, model, text, "completed")
        done["store"] = False
        stream = web.StreamResponse(
            headers={"content-type": "text/event-stream", **self._usage_headers(account)}
        )
        await stream.prepare(request)
        started = {**done, "status": "in_progress", "output": [], "usage": None}
        tools = body.get("tools") or []
        drawing = next((t for t in tools if t.get("type") == "image_generation"), None)
        if drawing is not None:  # the image tool (what the Codex CLI's image generation is)
            return await self._image(request, stream, done, started, drawing, text)
        item = done["output"][0]
        part = item["content"][0]
        at = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        for kind, fields in (
            ("response.created", {"response": started}),
            ("response.output_item.added", {"output_index": 0, "item": {**item, "content": []}}),
            ("response.content_part.added", {**at, "part": {**part, "text": ""}}),
            ("response.output_text.delta", {**at, "delta": text}),
            ("response.output_text.done", {**at, "text": text}),
            ("response.content_part.done", {**at, "part": part}),
            ("response.output_item.done", {"output_index": 0, "item": item}),
            ("response.completed", {"response": done}),
        ):
            data = orjson.dumps({"type": kind, **fields})
            await stream.write(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")
        await stream.write_eof()
        return stream

    async def _scripted(
        self, request: web.Request, body: dict[str, Any], model: str, account: str
    ) -> web.StreamResponse:
        """The scripted model's answer, streamed as the Responses API streams it."""
        decision = decide(agent_responses.conversation(body))
        self.answers.append(summary(decision))
        usage = agent_responses.usage(orjson.dumps(body), decision)
        stream = web.StreamResponse(
            headers={"content-type": "text/event-stream", **self._usage_headers(account)}
        )
        await stream.prepare(request)
        for event in agent_responses.stream(body, model, decision, usage):
            await stream.write(event)
        await stream.write_eof()
        return stream

    async def _image(
        self,
        request: web.Request,
        stream: web.StreamResponse,
        done: dict[str, Any],
        started: dict[str, Any],
        tool: dict[str, Any],
        prompt: str,
    ) -> web.StreamResponse:
        item = {
            "type": "image_generation_call",
            "id": f"ig_codex{next(_SEQUENCE):06d}",
            "status": "completed",
            "result": base64.b64encode(PNG).decode(),
            "revised_prompt": f"{prompt}, as drawn by {tool.get('model')}",
            "size": tool.get("size") or "1024x1024",
            "quality": tool.get("quality") or "medium",
            "background": tool.get("background") or "opaque",
            "output_format": tool.get("output_format") or "png",
        }
        done = {**done, "output": [item]}
        for kind, fields in (
            ("response.created", {"response": started}),
            ("response.output_item.added", {"output_index": 0, "item": {**item, "result": None}}),
            (
                "response.image_generation_call.completed",
                {"output_index": 0, "item_id": item["id"]},
            ),
            ("response.output_item.done", {"output_index": 0, "item": item}),
            ("response.completed", {"response": done}),
        ):
            data = orjson.dumps({"type": kind, **fields})
            await stream.write(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")
        await stream.write_eof()
        return stream

    async def _compact(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        refused = self._check(request)
        if refused is not None:
            return refused
        compacted = {
            "id": f"cmp_codex{next(_SEQUENCE):06d}",
            "object": "response.compaction",
            "model": body.get("model"),
            "output": [{"type": "compaction", "encrypted_content": "opaque-summary"}],
            "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
        }
        return web.json_response(compacted, headers=self._usage_headers(self._caller(request)))

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        refused = self._check(request)
        if refused is not None:
            return refused
        models = [
            {"slug": "gpt-5-codex", "display_name": "GPT-5 Codex", "context_window": 272000},
            {"slug": "gpt-5", "display_name": "GPT-5", "context_window": 272000},
        ]
        return web.json_response({"models": models})

    async def _usage(self, request: web.Request) -> web.Response:
        await self._record(request)
        refused = self._check(request)
        if refused is not None:
            return refused
        return web.json_response(
            {
                "plan_type": self.plan_type,
                "rate_limit": {
                    "primary_window": {
                        "used_percent": self.used(self._caller(request)),
                        "limit_window_seconds": 18000,
                        "reset_at": int(self.resets_at),
                    },
                    "secondary_window": {
                        "used_percent": 3,
                        "limit_window_seconds": 604800,
                        "reset_at": int(time.time() + 86400),
                    },
                },
            }
        )

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/oauth/authorize", self._authorize)
        app.router.add_post("/oauth/token", self._token)
        app.router.add_post("/api/accounts/deviceauth/usercode", self._device_start)
        app.router.add_post("/api/accounts/deviceauth/token", self._device_poll)
        app.router.add_post("/backend-api/codex/responses", self._responses)
        app.router.add_post("/backend-api/codex/responses/compact", self._compact)
        app.router.add_get("/backend-api/codex/models", self._models)
        app.router.add_get("/backend-api/wham/usage", self._usage)
        return app


def _oauth_error(status: int, code: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": code}}, status=status)


def _backend_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(
        {"error": {"type": code, "code": code, "message": message}}, status=status
    )
