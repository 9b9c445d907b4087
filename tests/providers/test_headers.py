from llmrelay.providers.headers import forwardable, of_kind


def _raw(pairs: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in pairs]


def test_only_protocol_headers_travel_upstream() -> None:
    headers = _raw(
        [
            ("Authorization", "Bearer client-key"),
            ("X-Api-Key", "client-key"),
            ("Cookie", "session=1"),
            ("Connection", "keep-alive, X-Custom-Hop"),
            ("X-Custom-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Transfer-Encoding", "chunked"),
            ("TE", "trailers"),
            ("Upgrade", "h2c"),
            ("Host", "gateway"),
            ("Content-Length", "10"),
            ("X-Forwarded-For", "1.2.3.4"),
            ("X-LLMRelay-Route-Tag", "a"),
            ("OpenAI-Organization", "org-client"),
            ("X-Request-ID", "abc"),
            ("User-Agent", "OpenAI/Python 1.0"),
            ("X-Stainless-Lang", "python"),
            ("Accept", "application/json"),
            ("OpenAI-Beta", "assistants=v2"),
            ("Anthropic-Version", "2023-06-01"),
            ("Anthropic-Beta", "prompt-caching-2024-07-31"),
        ]
    )
    assert forwardable(headers) == {
        "openai-beta": "assistants=v2",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "prompt-caching-2024-07-31",
    }


def test_a_bridged_call_keeps_only_its_own_protocols_headers() -> None:
    forwarded = {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "context-management-2025-06-27",
        "openai-beta": "responses=v1",
        "x-llmrelay-client-request-id": "req_1",
    }
    assert of_kind(forwarded, "openai") == {
        "openai-beta": "responses=v1",
        "x-llmrelay-client-request-id": "req_1",
    }
    assert of_kind(forwarded, "gemini") == {"x-llmrelay-client-request-id": "req_1"}
    assert of_kind(forwarded, "anthropic") == {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "context-management-2025-06-27",
        "x-llmrelay-client-request-id": "req_1",
    }
