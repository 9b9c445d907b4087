"""The offline token counter used when a provider reports no usage."""

from __future__ import annotations

from llmrelay.metering.estimate import answer_tokens, count_tokens, prompt_chars, prompt_tokens


def test_counts_are_close_to_a_bpe_tokenizer_on_ordinary_text() -> None:
    # tiktoken (o200k_base) counts: 7, 10 and 4
    assert count_tokens("Hello, how are you today?") == 7
    assert count_tokens("The quick brown fox jumps over the lazy dog.") == 10
    assert 3 <= count_tokens("你好世界") <= 6
    assert count_tokens("") == 0


def test_the_prompt_counts_text_and_leaves_images_out() -> None:
    image = "data:image/png;base64," + "A" * 100_000
    payload = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": image}},
                ],
            },
        ]
    }
    counted = prompt_tokens(payload)
    assert 10 <= counted <= 30


def test_an_answer_counts_its_generated_text_in_any_protocol() -> None:
    chat = {"choices": [{"message": {"role": "assistant", "content": "Hello there, friend."}}]}
    messages = {"content": [{"type": "text", "text": "Hello there, friend."}]}
    assert answer_tokens(chat) >= 4
    assert answer_tokens(messages) >= 4


def test_prompt_chars_bound_the_counted_prompt_from_above() -> None:
    """A budget's hold bounds the prompt by prompt_chars (gateway/prepaid.budget_hold): never
    below what prompt_tokens counts, for prose, code, numbers, other scripts and tools."""
    texts = ("hello there", "def f(x):\n    return x ** 2  # 1234", "日本語のテキスト", " a  b ")
    for text in texts:
        payload = {
            "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": ""}],
            "system": text,
            "tools": [{"name": "t", "description": text}],
        }
        assert prompt_chars(payload) >= prompt_tokens(payload)
    assert prompt_chars({"messages": [{"role": "user", "content": "abcd"}]}) == 3 + len("user") + 4
