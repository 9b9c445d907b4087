"""Which providers serve the Responses API themselves."""

from llmrelay.providers.presets import PRESETS, speaks_responses


def test_only_openai_and_presets_that_say_so_speak_responses() -> None:
    assert speaks_responses("openai", None)
    assert not speaks_responses("openai_compatible", None)  # unknown servers: through chat
    assert not any(speaks_responses("openai_compatible", name) for name in PRESETS)
    assert not speaks_responses("anthropic", None)
    assert all(p.base_url.endswith("/v1") for p in PRESETS.values())
