"""Token counts for a request whose provider reported none: an offline approximation of a
BPE tokenizer, so such a record is counted (and flagged `usage_source = "estimated"`), never
recorded as zero.

BPE tokenizers (OpenAI's o200k/cl100k, Anthropic's, Gemini's) first split text into words,
numbers and punctuation, then cut long pieces into sub-words of about five characters. This
does the same with one regex and a length rule: within about 15 % of tiktoken on English prose
and code, with no vocabulary file to download (the gateway reaches no network at start).
Only for records; the tpm admission keeps its cheaper characters/4 (limits/estimate.py).
"""

from __future__ import annotations

import re
from typing import Any, Final

#: The pieces of text that are one token each, whatever their length (a word, up to three
#: digits, any other character that is not whitespace: Unicode's, as str.isspace), ...
_PIECES: Final = re.compile(r"[A-Za-z]+|[0-9]{1,3}|[^\sA-Za-z0-9]")
#: ... the words long enough to be cut into sub-words (each a whole run of letters: the
#: scan meets a run at its first letter, and the match is greedy), and runs of whitespace
#: that are a token of their own (a single space joins the next word's token).
_LONG_WORDS: Final = re.compile(r"[A-Za-z]{7,}", re.ASCII)
_SPACE_RUNS: Final = re.compile(r"\s{2,}", re.ASCII)
#: Fields holding images or files (URLs, base64): their length says nothing about tokens.
_SKIPPED: Final = frozenset({"data", "url", "image_url", "file_data", "source", "b64_json"})
#: Per-message framing tokens (role and separators), as OpenAI documents for chat.
_PER_MESSAGE: Final = 3
#: Words up to six letters are usually one token (_LONG_WORDS); longer ones split into
#: pieces of about this many characters.
_CHARS_PER_SUBWORD: Final = 5


def count_tokens(text: str) -> int:
    """Common words are one token, a character outside ASCII is one too, a longer word one
    per ~5 characters. Counted by the regex engine (`findall`), not piece by piece in Python:
    five times cheaper on short prompts, which a prepaid reservation counts on the request
    path."""
    count = len(_PIECES.findall(text)) + len(_SPACE_RUNS.findall(text))
    for word in _LONG_WORDS.findall(text):
        count += -(-len(word) // _CHARS_PER_SUBWORD) - 1  # its first piece is counted above
    return count


def text_of(value: Any, depth: int = 0) -> list[str]:
    """The strings of a JSON value, images and files left out."""
    if type(value) is str:
        return [value]
    if depth > 12:
        return []
    out: list[str] = []
    if type(value) is list:
        for item in value:
            out += text_of(item, depth + 1)
    elif type(value) is dict:
        for key, item in value.items():
            if key not in _SKIPPED:
                out += text_of(item, depth + 1)
    return out


_PROMPT_FIELDS: Final = (
    "system",
    "instructions",
    "input",
    "prompt",
    "tools",
    "functions",
    # Gemini's (generateContent, countTokens, embedContent, batchEmbedContents)
    "contents",
    "systemInstruction",
    "content",
    "requests",
)


def prompt_tokens(payload: dict[str, Any]) -> int:
    """The prompt of a chat, Messages, Responses, Gemini or embeddings request."""
    count = 0
    messages = payload.get("messages")
    if type(messages) is list:
        for message in messages:
            count += _PER_MESSAGE + sum(map(count_tokens, text_of(message)))
    for name in _PROMPT_FIELDS:
        if name in payload:
            count += sum(map(count_tokens, text_of(payload[name])))
    return count


def prompt_chars(payload: dict[str, Any]) -> int:
    """The prompt's characters plus the messages' framing: at least `prompt_tokens` (every
    piece it counts is a character or more), for a fraction of its cost (no regex, no list of
    the strings): what a budget's hold and a prepaid request admitted in memory bound a prompt
    by on the request path (gateway/prepaid.py)."""
    count = 0
    messages = payload.get("messages")
    if type(messages) is list:
        for message in messages:
            count += _PER_MESSAGE + chars_of(message, 0)
    for name in _PROMPT_FIELDS:
        if name in payload:
            count += chars_of(payload[name], 0)
    return count


def chars_of(value: Any, depth: int) -> int:
    """The length of the strings `text_of` would give, without making their list."""
    if type(value) is str:
        return len(value)
    if depth > 12:
        return 0
    count = 0
    if type(value) is list:
        for item in value:
            count += chars_of(item, depth + 1)
    elif type(value) is dict:
        for key, item in value.items():
            if key not in _SKIPPED:
                count += chars_of(item, depth + 1)
    return count


_ANSWER_FIELDS: Final = ("choices", "content", "output", "candidates")


def answer_tokens(body: dict[str, Any]) -> int:
    """The generated part of a non-streamed answer in any of the protocols."""
    count = 0
    for name in _ANSWER_FIELDS:
        if name in body:
            count += sum(map(count_tokens, text_of(body[name])))
    return count
