"""Azure OpenAI on the mock upstream: the OpenAI answers behind Azure's own checks, so a
gateway's `azure_openai` adapter is tested against the real wire format.

Base URL: the host root (`MockUpstream.root_url`); the routes are
`POST /openai/deployments/{deployment}/chat/completions` and `.../embeddings`. The model is
the deployment (or the body's `model`, when it names one) and picks the behaviour as on the
OpenAI side (`mock_upstream._behaviour`). Before any model runs, a request needs an `api-key`
header and an `api-version` query parameter, and the model `content-filter` gets the 400 that
Azure's content filter answers for a blocked prompt.
"""

from __future__ import annotations

from aiohttp import web

from tests.support.mock_upstream import MockUpstream, _behaviour


class AzureDeployments:
    """The two routes; what passes Azure's checks is answered by `server`'s OpenAI handlers."""

    def __init__(self, server: MockUpstream) -> None:
        self.server = server

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = {"model": request.match_info["deployment"], **await self.server._receive(request)}
        refused = _refusal(request, str(body["model"]))
        return refused if refused is not None else await self.server._answer_chat(request, body)

    async def embeddings(self, request: web.Request) -> web.Response:
        body = {"model": request.match_info["deployment"], **await self.server._receive(request)}
        refused = _refusal(request)
        return refused if refused is not None else self.server._answer_embeddings(body)


def _refusal(request: web.Request, model: str = "") -> web.Response | None:
    """What Azure answers before any model runs: no key, no `api-version` (a 404 "Resource not
    found" on the real service, not a 400), or a prompt its content filter blocks."""
    if not request.headers.get("api-key"):
        message = (
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
            "provide a valid key for an active subscription and use a correct regional API "
            "endpoint for your resource."
        )
        return web.json_response({"error": {"code": "401", "message": message}}, status=401)
    if not request.query.get("api-version"):
        error = {"error": {"code": "404", "message": "Resource not found"}}
        return web.json_response(error, status=404)
    if _behaviour(model)[0] == "content-filter":
        return web.json_response(_CONTENT_FILTERED, status=400)
    return None


_SAFE = {"filtered": False, "severity": "safe"}
#: What Azure OpenAI answers when its content filter blocks a prompt (HTTP 400).
_CONTENT_FILTERED = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
        "management policy. Please modify your prompt and retry. To learn more about our content "
        "filtering policies please read our documentation: "
        "https://go.microsoft.com/fwlink/?linkid=2198766",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": True, "severity": "high"},
                **{category: _SAFE for category in ("self_harm", "sexual", "violence")},
            },
        },
    }
}
