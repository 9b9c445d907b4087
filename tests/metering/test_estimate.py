"""The offline token counter used when a provider reports no usage."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmrelay.metering.estimate import (
    answer_tokens,
    count_tokens,
    prompt_chars,
    prompt_tokens,
    text_of,
)

_ONE_BY_ONE = re.compile(r"[A-Za-z]+|\d{1,3}|[^\sA-Za-z\d]|\s+", re.ASCII)


def _piece_by_piece(text: str) -> int:
    """The rule as a loop over pieces: what count_tokens counts with three `findall`s."""
    count = 0
    for match in _ONE_BY_ONE.finditer(text):
        piece = match.group()
        if piece[0].isspace():
            count += len(piece) > 1
        elif len(piece) <= 6:
            count += 1
        else:
            count += -(-len(piece) // 5)
    return count


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab Zx 7\t\n\u00e9\u4f60\u3000,.-_"), max_size=80) | st.text()
)
@example("abcdefg hijklmnopqrstu  1234567 \u4f60\u597d   x")
def test_the_regex_count_is_the_piece_by_piece_rule(text: str) -> None:
    assert count_tokens(text) == _piece_by_piece(text)


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


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["text", "content", "data", "url", "name"]), children)
    ),
    max_leaves=20,
)


@given(st.lists(_JSON, max_size=4), _JSON, _JSON)
@settings(max_examples=300, deadline=None)
def test_prompt_chars_is_the_length_of_the_counted_strings(
    messages: list[object], system: object, tools: object
) -> None:
    """prompt_chars walks the payload without making the list of its strings (it runs for
    every prepaid and budgeted request): the same strings as the count, so its bound holds."""
    payload = {"messages": messages, "system": system, "tools": tools}
    framed = sum(3 for m in messages)
    strings = [*(s for m in messages for s in text_of(m)), *text_of(system), *text_of(tools)]
    assert prompt_chars(payload) == framed + sum(map(len, strings))
    assert prompt_chars(payload) >= prompt_tokens(payload)
