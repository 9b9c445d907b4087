"""Helpers shared by the tests of the Responses -> Chat request translation."""

from typing import Any

from llmrelay.protocols.responses_chat import responses_request_to_chat


def to_chat(**fields: Any) -> tuple[dict[str, Any], list[str]]:
    payload = {"model": "virtual", "input": "hi", **fields}
    return responses_request_to_chat(payload, upstream_model="upstream")


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
