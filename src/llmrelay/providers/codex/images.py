"""Image generation on a ChatGPT Codex subscription: the virtual model `codex-gpt-image-2`,
whose route targets the fixed upstream model `gpt-image-2` on an `openai_codex` provider.

The Codex backend has no Images API. The Codex CLI generates images the way the Responses
API does: a Responses call to a text model with the built-in `image_generation` tool (here
forced, `tool_choice: {"type": "image_generation"}`, its `model` the route's upstream model),
whose answer carries an `image_generation_call` output item with the image as base64
(`result`). So OpenAI's `POST /v1/images/generations` body becomes that Responses call
(`image_request`), sent as every Codex call is (streamed, `store` false), and the completed
response becomes the Images API's answer (`images_from_stream`):
`{"created", "data": [{"b64_json", "revised_prompt"}], "usage", "size", "quality",
"background", "output_format"}`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.codex.rewritten import RewrittenAnswer
from llmrelay.providers.errors import UpstreamProtocolError

#: The text model that drives the image tool (the Codex CLI's default model family).
DRIVER_MODEL: Final = "gpt-5"
#: Images API fields the image tool takes as they are.
_TOOL_FIELDS: Final = ("size", "quality", "background", "output_format", "moderation")


def image_request(payload: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    """The Responses body that asks the backend for one image of `payload["prompt"]`."""
    tool: dict[str, Any] = {"type": "image_generation", "model": upstream_model}
    for name in _TOOL_FIELDS:
        if isinstance(payload.get(name), str):
            tool[name] = payload[name]
    prompt = str(payload.get("prompt") or "")
    return {
        "model": DRIVER_MODEL,
        "instructions": "Generate the image the user describes with the image_generation tool.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}
        ],
        "tools": [tool],
        "tool_choice": {"type": "image_generation"},
        "store": False,
        "stream": True,
    }


def images_from_stream(completed: UpstreamResponse) -> UpstreamResponse:
    """The completed Response (adapter.py's `completed_from_stream`, over the backend's
    stream) answered as the Images API's JSON."""
    return RewrittenAnswer(completed, lambda raw: images_answer(orjson.loads(raw)))


def images_answer(response: dict[str, Any]) -> bytes:
    """A completed Response with `image_generation_call` items -> the Images API answer."""
    data: list[dict[str, Any]] = []
    shown: dict[str, Any] = {}
    for item in response.get("output") or ():
        if not isinstance(item, dict) or item.get("type") != "image_generation_call":
            continue
        result = item.get("result")
        if not isinstance(result, str) or not result:
            continue
        image: dict[str, Any] = {"b64_json": result}
        if isinstance(item.get("revised_prompt"), str):
            image["revised_prompt"] = item["revised_prompt"]
        data.append(image)
        for name in ("size", "quality", "background", "output_format"):
            if isinstance(item.get(name), str):
                shown.setdefault(name, item[name])
    if not data:
        raise UpstreamProtocolError("the Codex backend's response carried no generated image")
    created = response.get("created_at")
    answer: dict[str, Any] = {"created": created if isinstance(created, int) else 0, "data": data}
    answer.update(shown)
    usage = response.get("usage")
    if isinstance(usage, dict):
        answer["usage"] = usage
    return orjson.dumps(answer)
