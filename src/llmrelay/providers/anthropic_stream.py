"""An Anthropic Messages event stream read as a chat stream (the anthropic adapter's decoder).

Two ways to read it. `chunks` gives the chat chunks for the chat relay to examine as it would
a provider's (what a bridge reading the chat stream uses). `write`, once `direct` has given it
the relay's terms, writes the client's chat events itself (the virtual model's name, the
usage chunk only when the client asked for it, nothing after completion) and keeps
`StreamFacts` on what they hold, so the relay passes them on unread: measured, reading the
stream twice (translating it, then examining the translation) was most of what a translated
stream cost.

Text deltas are nearly every event of a stream. Written by Anthropic as
`event: content_block_delta` + its data in a fixed key order, with a plain text (no quote,
backslash or control character), their JSON string goes into the chat chunk as it came,
unparsed; `write` finds all of a chunk's such deltas with one regular expression split and
joins them between the message's byte template in one call. Every other event is parsed and
translated through protocols.chat_anthropic_stream, which hypothesis tests hold the
shortcuts to.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from llmrelay.protocols.anthropic import upstream_error
from llmrelay.protocols.chat_anthropic import anthropic_response_to_chat
from llmrelay.protocols.chat_anthropic_stream import AnthropicStreamToChat, StreamError
from llmrelay.protocols.sse import LF, SSEParser, parse_block
from llmrelay.providers.errors import UpstreamErrorEvent
from llmrelay.providers.translated import StreamFacts, StreamTerms, context_code, error_event

Chunk = dict[str, Any] | bytes | None

#: How a text delta of the first content block starts (its JSON string follows).
_TEXT_HEAD: Final = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"'
)
_TEXT_HEAD_LEN: Final = len(_TEXT_HEAD) - 1  # the string's opening quote belongs to it
#: What precedes the JSON string of such a delta, from the blank line that ends the block
#: before it (`write` puts one before the first block).
_DELTA_HEAD: Final = b"\n\n" + _TEXT_HEAD[:_TEXT_HEAD_LEN]
#: The rest of each of those blocks, joined by newlines (which a block's rest cannot hold):
#: a plain non-empty JSON string (no escape, no control character) and the two braces. A
#: piece holding more (another event after the delta, a field after the text) fails it.
_TEXTS: Final = re.compile(rb'"[^"\\\x00-\x1f]+"\}\}(?:\n"[^"\\\x00-\x1f]+"\}\})*')
#: content_block_start of an empty text block 0 (every text answer's): no chat event.
_EMPTY_TEXT_START: Final = (
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}'
)
_ROLE_DELTA: Final = b'{"role":"assistant","content":""}'
#: Events with nothing to say in chat (named as Anthropic names every event).
_PING: Final = b"event: ping\n"
_BLOCK_STOP: Final = b"event: content_block_stop\n"
_SILENT: Final = (_PING, _BLOCK_STOP)
_BACKSLASH: Final = ord("\\")
_MESSAGE_STOP: Final = b'{"type":"message_stop"}'
#: The `event:` lines of Anthropic's events, named without a decode each time.
_EVENT_NAMES: Final = {
    f"event: {name}".encode(): name
    for name in (
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "error",
    )
}


class AnthropicChatDecoder:
    def __init__(self, model: str, include_usage: bool, stream: bool) -> None:
        self._model = model
        self._stream = AnthropicStreamToChat(model=model, include_usage=include_usage)
        self._parser = SSEParser() if stream else None
        self._terms: StreamTerms | None = None
        self._facts = StreamFacts()
        self._usage_written = False

    # -- the ChatDecoder protocol (providers.translated) ---------------------------------

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return anthropic_response_to_chat(body, model=self._model)

    def error(self, status: int, raw: bytes) -> tuple[str, str | None]:
        found = upstream_error(raw)
        message = found[1] if found else f"anthropic answered {status}"
        return message, context_code(message) if status == 400 else None

    def retry_after(self, raw: bytes) -> str | None:
        return None  # Anthropic sends a retry-after header

    def chunks(self, chunk: bytes) -> list[Chunk]:
        """Text deltas, nearly every event of a stream, are recognised by how Anthropic writes
        them (`event: content_block_delta`, then its data in a fixed key order, a text with no
        quote, backslash or newline): the text's JSON string goes into the chat chunk as it
        came, unparsed. Other blocks of the usual two lines are split without the line parse;
        anything else is parsed as the SSE spec says."""
        assert self._parser is not None
        text = self._parser.complete_text(chunk)
        if not text:
            return []
        out: list[Chunk] = []
        template: tuple[bytes, bytes] | None = None
        for block in text[:-2].split(b"\n\n"):
            if block.startswith(_TEXT_HEAD) and block.endswith(b'"}}'):
                token = block[_TEXT_HEAD_LEN:-2]
                if token.count(b'"') == 2 and _BACKSLASH not in token and LF not in token:
                    if len(token) > 2:
                        if template is None:
                            template = self._stream.text_template()
                        out.append(template[0] + token + template[1])
                    continue
            elif block.startswith(_SILENT):
                continue  # ping, content_block_stop: nothing to say in chat
            head, found, data = block.partition(b"\ndata: ")
            if found and head.startswith(b"event: ") and LF not in head and LF not in data:
                self._take(head[7:].decode(), data, out)
                continue
            event = parse_block(block)
            if event is not None:
                self._take(event[0], event[1], out)
        return out

    def end(self) -> list[Chunk]:
        return []

    # -- the DirectChatDecoder protocol --------------------------------------------------

    def direct(self, terms: StreamTerms) -> StreamFacts:
        self._terms = terms
        self._stream.model = terms.model
        return self._facts

    def write(self, chunk: bytes) -> bytes:
        """The client's chat events for these stream bytes; see the module's doc.

        The text deltas of block 0 are found by one split on how each starts; when every
        piece between two of them is exactly one text (checked by one regular expression
        over the texts alone) they are joined into chat events in one call. Anything else,
        or a chunk not of that shape, is read block by block."""
        assert self._parser is not None
        text = self._parser.complete_text(chunk)
        facts = self._facts
        if not text or facts.complete:
            return b""
        out: list[bytes] = []
        pieces = (b"\n\n" + text).split(_DELTA_HEAD)
        if len(pieces) > 1:
            last, found, after = pieces[-1].partition(b"}}\n\n")
            pieces[-1] = last + b"}}"
            texts = b"\n".join(pieces[1:])
            if found and _TEXTS.fullmatch(texts) is not None:
                if pieces[0]:
                    self._write_blocks(pieces[0][2:] + b"\n\n", out)
                    if facts.complete:
                        return b"".join(out)
                prefix, suffix = self._stream.text_template()
                out.append(prefix + texts[:-2].replace(b"}}\n", suffix + prefix) + suffix)
                facts.events += len(pieces) - 1
                facts.content = True
                if after:
                    self._write_blocks(after, out)
                return b"".join(out)
        self._write_blocks(text, out)
        return b"".join(out)

    # -- reading events one by one -------------------------------------------------------

    def _write_blocks(self, text: bytes, out: list[bytes]) -> None:
        """Complete events (from `write`) one at a time; nothing after completion."""
        facts = self._facts
        for block in text[:-2].split(b"\n\n"):
            # (Two starts, not one with a tuple: compiled, these are direct calls.)
            if (
                block.startswith(_PING)
                or block.startswith(_BLOCK_STOP)
                or block == _EMPTY_TEXT_START
            ):
                continue  # nothing to say in chat
            head, found, data = block.partition(b"\ndata: ")
            if found and head.startswith(b"event: ") and LF not in head and LF not in data:
                name: str | None = _EVENT_NAMES.get(head) or head[7:].decode()
            else:
                event = parse_block(block)
                if event is None:
                    continue
                name, data = event
            self._write_event(name, data, out)
            if facts.complete:
                return

    def _write_event(self, name: str | None, data: bytes, out: list[bytes]) -> None:
        """One event: the message's start and end written from the template, the rest
        translated as `chunks` does."""
        terms = self._terms
        assert terms is not None
        if data == _MESSAGE_STOP:  # its usual form: nothing in it to read
            event: Any = {"type": "message_stop"}
        else:
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                terms.on_malformed()
                return
        if type(event) is not dict:
            return
        facts = self._facts
        stream = self._stream
        kind = event.get("type") or name
        if kind == "message_start":
            stream.start(event.get("message") or {})
            out.append(stream.event(_ROLE_DELTA))
            facts.events += 1
        elif kind == "message_delta":
            reason = stream.delta(event)
            if reason is not None:
                self._finish(reason, out)
        elif kind == "message_stop":
            reason, usage_chunk = stream.stop()
            if reason is not None:
                self._finish(reason, out)
            if usage_chunk is not None and not facts.complete:
                terms.on_usage(usage_chunk["usage"])
                facts.content = self._usage_written = True
                if terms.forward_usage:
                    out.append(b"data: " + orjson.dumps(usage_chunk) + b"\n\n")
                    facts.events += 1
                facts.complete = True  # the finish is written: it came first
        else:
            chunks: list[Chunk] = []
            self._translate(name, event, chunks)
            for chunk in chunks:
                if chunk is None:
                    continue
                if type(chunk) is not bytes:
                    assert isinstance(chunk, dict)
                    if "error" in chunk:
                        raise UpstreamErrorEvent(str(chunk["error"]["message"])[:200])
                    chunk = b"data: " + orjson.dumps(chunk) + b"\n\n"
                out.append(chunk)  # text or tool calls
                facts.events += 1
                facts.content = True

    def _finish(self, reason: str, out: list[bytes]) -> None:
        facts = self._facts
        out.append(self._stream.event(b"{}", reason))
        facts.events += 1
        facts.finished = facts.content = True
        terms = self._terms
        assert terms is not None
        if self._usage_written or terms.end_at_finish:
            facts.complete = True

    def _take(self, name: str | None, data: bytes, out: list[Chunk]) -> None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            out.append(None)  # malformed: dropped and counted by the relay
            return
        if isinstance(event, dict):
            self._translate(name, event, out)

    def _translate(self, name: str | None, event: dict[str, Any], out: list[Chunk]) -> None:
        if name == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                text = delta.get("text")
                if isinstance(text, str):
                    if text:
                        out.append(self._stream.text_event(text))
                    return
        try:
            out.extend(self._stream.feed(name, event))
        except StreamError as exc:
            out.append(error_event(exc.message, exc.error_type))
