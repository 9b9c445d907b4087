import pytest

from llmrelay.providers.openai_reasoning import takes_reasoning_effort


@pytest.mark.parametrize(
    "model",
    [
        "o1",
        "o3",
        "o3-mini",
        "o4-mini",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5.1",
        "gpt-5.2-codex",
        "codex-mini-latest",
        "my-azure-deployment",
    ],
)
def test_reasoning_models_take_an_effort(model: str) -> None:
    assert takes_reasoning_effort(model)


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "gpt-4o-mini-2024-07-18",
        "gpt-4.1",
        "gpt-4.1-nano",
        "gpt-4",
        "gpt-4.5-preview",
        "gpt-3.5-turbo",
        "chatgpt-4o-latest",
        "gpt-5-chat-latest",
        "gpt-5.1-chat-latest",
        "o1-mini",
        "o1-preview",
    ],
)
def test_models_that_do_not_reason_take_none(model: str) -> None:
    assert not takes_reasoning_effort(model)
