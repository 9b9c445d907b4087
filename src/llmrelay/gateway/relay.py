"""Relaying an OpenAI chat stream from a provider to the client, event by event.

Read-ahead, deadlines and endings are stream_relay.py's. The stream is complete once every
choice has its finish reason (and the usage chunk has come, when the client asked for one);
`[DONE]` then goes out at once; a break or stall after the first byte ends it with an error
event, never with `[DONE]`.

Every upstream event is parsed (a malformed one is dropped and counted) and passed on with
only `model` renamed to the virtual model: the name the provider reports (often a dated
snapshot of the model asked for) is learnt from its first event and then renamed by one
byte replacement per chunk (see protocols.openai.ModelRename); an event the replacement
missed is re-serialised.

A translated stream whose decoder writes the client's events itself (providers.translated,
`TranslatedResponse.direct`) is not examined again: the decoder is given the terms above
(the virtual model's name, whether the usage goes on, when the stream is complete) and its
`StreamFacts` say what it wrote; its errors and malformed events reach the relay as they
would have from the events.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final

import orjson
import structlog

from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import GatewayError
from llmrelay.gateway.stream_relay import StreamRelay
from llmrelay.protocols.openai import DONE, ModelRename, error_event
from llmrelay.protocols.sse import LF, SSEParser, event_data, plain_data
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import UpstreamErrorEvent
from llmrelay.providers.translated import StreamFacts, StreamTerms, TranslatedResponse
from llmrelay.snapshot.model import RouteSnap

log = structlog.get_logger(__name__)

_CONTENT_FIELDS: Final = ("content", "tool_calls", "function_call", "refusal", "reasoning_content")
_DATA: Final = b"data: "
_END: Final = b"\n\n"
_DONE_EVENT: Final = b"data: [DONE]\n\n"
#: How a content delta of a one-choice stream in compact JSON ends, with its separator.
_RUN_END: Final = b'"finish_reason":null}]}\n\n'
_FINISH_KEY: Final = b'"finish_reason":"'
_USAGE: Final = b'"usage":{'
#: The opening delta as OpenAI-compatible servers write it (no content yet).
_OPENING_DELTA: Final = b'"delta":{"role":"assistant","content":""}'
#: How a content delta, and a plain finish, of a one-choice stream end in compact JSON.
#: These keys cannot occur inside a JSON string (its quotes are escaped there).
_DELTA_ENDINGS: Final = (b'"finish_reason":null}]}', b'"finish_reason":null}],"usage":null}')
_FINISH_ENDINGS: Final = tuple(
    f'"finish_reason":"{reason}"}}]{tail}}}'.encode()
    for reason in ("stop", "length", "tool_calls", "content_filter", "function_call")
    for tail in ("", ',"usage":null')
)


class ChatStreamRelay(StreamRelay):
    def __init__(
        self,
        route: RouteSnap,
        response: UpstreamResponse,
        *,
        request_id: str,
        choices: int,
        usage_requested: bool,
        record: CallRecord,
        usage_coming: bool = False,
        rename: ModelRename,
        on_malformed: Callable[[], None],
        on_end: Callable[[CallRecord], None],
    ) -> None:
        super().__init__(route, response, request_id=request_id, record=record, on_end=on_end)
        self._parser = SSEParser()
        self._rename = rename
        self._virtual_model = rename.virtual
        self._replacement = rename.replacement
        # the provider's `"model":...`, as learnt by an earlier stream of this route
        self._pattern: bytes | None = rename.reported.get(route.upstream_model)
        self._model_known = False  # until an event of this stream shows the rename works
        self._choices = choices
        #: Wait for the usage chunk when the client asked for it or the gateway did (the
        #: provider then sends it: providers/openai.ask_stream_usage); pass it on only when
        #: the client asked.
        self._usage_requested = usage_requested or usage_coming
        self._forward_usage = usage_requested
        self._on_malformed = on_malformed
        self._finished: set[int] = set()
        self._usage_seen = False
        self._done = False
        #: What a decoder writing the client's events found (None: the events are read).
        self._facts: StreamFacts | None = None
        if type(response) is TranslatedResponse:
            self._facts = response.direct(
                StreamTerms(
                    model=self._virtual_model,
                    forward_usage=usage_requested,
                    end_at_finish=not self._usage_requested,
                    on_usage=record.take_usage,
                    # not a method of the relay: the relay holds the decoder, and a cycle
                    # would keep each stream's objects until the garbage collector ran
                    on_malformed=partial(_malformed, on_malformed, request_id),
                )
            )

    @property
    def _complete(self) -> bool:
        if self._facts is not None:
            return self._facts.complete
        return self._done or (
            len(self._finished) >= self._choices and (self._usage_seen or not self._usage_requested)
        )

    def _ended_early_is_complete(self) -> bool:
        """Every choice finished; only the usage chunk never came."""
        if self._facts is not None:
            return self._facts.finished
        return bool(self._finished) and len(self._finished) >= self._choices

    def _closing(self) -> bytes:
        return DONE

    def _error_event(self, error: GatewayError) -> bytes:
        return error_event(error, self._request_id)

    def _take(self, chunk: bytes, out: list[bytes], *, priming: bool) -> bool:
        """Take one upstream chunk's events into `out` (as client bytes); stop at completion.
        Returns whether any event carried content (only looked at while priming; a finish
        reason or usage counts as content).

        This runs for every chunk of every stream, so it is tight. Most events of a stream
        are content deltas, and those of a one-choice stream in compact JSON are recognised
        by how they end (`"finish_reason":null}]}`), as is a plain finish event; the rest
        (usage, errors, anything unusual; the first event only until the rename is known to
        work) are parsed. When every event passes unchanged (the usual case) the output is
        the chunk's own text, not a rebuilt copy. A chunk of several events that opens with
        a run of such deltas (a burst: the whole answer in one read) has the run checked in
        one piece (`_take_run`) and only the events after it looked at one by one.
        Measured: parsing every event cost more than all the rest llmrelay does for a
        stream; C-level scans of a whole chunk (split, join, memchr) cost less than a
        Python step per event."""
        facts = self._facts
        if facts is not None:  # written for the client by the decoder: passed on as it is
            self._taken = facts.events
            out.append(chunk)
            return facts.content
        text = self._parser.complete_text(chunk)
        if not text:
            return False
        pattern = self._pattern
        if pattern is not None:
            pieces = text.split(pattern)  # one scan renames and counts (replace scans twice)
            renamed = len(pieces) - 1
            if renamed:
                text = self._replacement.join(pieces)
        else:
            renamed = 0
        if renamed > 1 and self._choices == 1:
            taken = self._take_run(text, renamed, out, priming)
            if taken:
                return True
        return self._take_each(text, renamed, out, priming)

    def _take_run(self, text: bytes, renamed: int, out: list[bytes], priming: bool) -> bool:
        """The chunk's leading run of content deltas, taken without a step per event: True
        when it was (then the events after it went through `_take_each`), False when this
        chunk is not such (nothing taken). The same events pass, and the same are examined,
        as `_take_each` would pass and examine them once the stream's content is known: the
        run's events are each a single `data:` line ending in `_RUN_END` (one split, one
        memchr over the run), with every event naming the model. While priming, the content
        is a finish after the run, else a text delta opening it (after the opening delta or
        not); only in the first case may delta-shaped events before the first text go
        unparsed, as they do after it."""
        pieces = text.split(_RUN_END)
        run = len(pieces) - 1
        if not run or not text.startswith(_DATA):
            return False
        tail = pieces.pop()
        if LF in b"".join(pieces):  # a line other than one `data:` per event in the run
            return False
        # While priming, the content must be known: from the finish that follows (the events
        # after the run are looked at one by one), else from how the run opens.
        if (
            priming
            and tail.find(_FINISH_KEY) < 0
            and not (
                _delta_text(pieces[0])
                or (run > 1 and _opening(pieces[0]) and _delta_text(pieces[1]))
            )
        ):
            return False
        datas = plain_data(tail) if tail else []
        if datas is None:
            return False
        if not self._model_known:
            done = bool(datas) and datas[-1] == b"[DONE]"
            if renamed < run + len(datas) - done:
                return False  # an event not renamed: the model's name is to be learnt
            self._model_known = True
        self._taken += run
        out.append(text[: len(text) - len(tail)] if tail else text)
        if tail:
            self._take_datas(tail, datas, True, out, False)
        return True

    def _take_each(self, text: bytes, renamed: int, out: list[bytes], priming: bool) -> bool:
        """Every event of the chunk's `text` (renamed), one by one."""
        datas = plain_data(text)
        plain = datas is not None
        if datas is None:
            datas = event_data(text)
        if renamed and datas and not self._model_known:
            # every event of the chunk named the model (and was renamed): no need to parse one
            self._model_known = renamed >= len(datas) - (datas[-1] == b"[DONE]")
        return self._take_datas(text, datas, plain, out, priming)

    def _take_datas(
        self, text: bytes, datas: list[bytes], plain: bool, out: list[bytes], priming: bool
    ) -> bool:
        """The events of `text`, `datas` their data; `plain`: `text` is only single-line
        `data:` events (then what passes unchanged goes out as `text` itself)."""
        self._taken += len(datas)
        kept: list[bytes] | None = None if plain else []  # None: the text passes as it is
        content = not priming  # while priming: whether an event carried content
        # By their endings once the model's name is handled (learnt, or already ours).
        by_ending = self._choices == 1 and self._model_known
        for position, data in enumerate(datas):
            passed: bytes | None = data
            if data == b"[DONE]":
                self._done = True
                content = True
                if kept is None and position < len(datas) - 1:
                    kept = datas[:position]
                break
            if by_ending and data.endswith(_DELTA_ENDINGS) and (content or _delta_text(data)):
                content = True
            elif not content and by_ending and data.endswith(_DELTA_ENDINGS) and _opening(data):
                pass  # the opening delta: no content yet
            # A finish carrying usage (some servers send it so) is parsed: its usage counts.
            elif by_ending and data.endswith(_FINISH_ENDINGS) and data.find(_USAGE) < 0:
                self._finished.add(0)
                content = True
            else:
                passed, carried = self._parse(data, datas, position)
                content = content or carried
                by_ending = self._choices == 1 and self._model_known
            if passed is not data and kept is None:
                kept = datas[:position]
            if kept is not None and passed is not None:
                kept.append(passed)
            if self._finished and self._complete:
                rest = len(datas) - 1 - position
                if rest and kept is None:
                    if rest == 1 and datas[-1] == b"[DONE]":
                        self._done = True  # the provider's own end: ours replaces it
                    else:
                        kept = datas[: position + 1]  # events after completion are dropped
                break
        if kept is None:
            if self._done and text.endswith(_DONE_EVENT):
                text = text[: -len(_DONE_EVENT)]
            if text:
                out.append(text)
        elif kept:
            out.append(_DATA + b"\n\ndata: ".join(kept) + _END)
        return content

    def _parse(self, data: bytes, datas: list[bytes], position: int) -> tuple[bytes | None, bool]:
        """An event read in full: what passes on (None: dropped as malformed) and whether it
        carried content."""
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            event = None
        if type(event) is not dict:
            if data:  # an event with no data (a named ping) is not malformed
                self._malformed()
            return None, False
        if "error" in event:
            raise UpstreamErrorEvent(_error_text(event))
        content = False
        choices = event.get("choices")
        if choices:
            content = self._look_at_choices(choices) or self._has_content(choices)
        usage = event.get("usage")
        withheld = False
        if usage:
            self._usage_seen = True
            self._record.take_usage(usage)
            content = True
            if not self._forward_usage:  # the gateway asked for it, not the client
                if not choices:
                    return None, content
                event["usage"] = None
                withheld = True
        virtual = self._virtual_model
        model = event.get("model", virtual)
        if model == virtual:
            self._model_known = True
            if not withheld:  # (multi-line data is written anew, as one line)
                return (data if LF not in data else orjson.dumps(event)), content
        # Another name, or the byte replacement missed it (other spacing).
        elif type(model) is str and self._rename.pattern(model) != self._pattern:
            self._learn(model, datas, position + 1)
            self._model_known = True
        event["model"] = virtual
        return orjson.dumps(event), content

    def _malformed(self) -> None:
        _malformed(self._on_malformed, self._request_id)

    def _learn(self, model: str, datas: list[bytes], start: int) -> bytes:
        """Remember the provider's name for the model for the byte replacement, and apply it
        to the events of this chunk still to come."""
        pattern = self._pattern = self._rename.pattern(model)
        self._rename.reported[self._route.upstream_model] = pattern
        replacement = self._replacement
        for index in range(start, len(datas)):
            datas[index] = datas[index].replace(pattern, replacement)
        return pattern

    def _look_at_choices(self, choices: Any) -> bool:
        """Record finished choices; True if any choice finished."""
        finished = False
        if type(choices) is not list:
            return False
        for choice in choices:
            if type(choice) is dict and choice.get("finish_reason") is not None:
                index = choice.get("index")
                self._finished.add(index if type(index) is int else 0)
                finished = True
        return finished

    @staticmethod
    def _has_content(choices: Any) -> bool:
        if type(choices) is not list:
            return False
        for choice in choices:
            if type(choice) is dict:
                if choice.get("finish_reason") is not None:
                    return True
                delta = choice.get("delta")
                if type(delta) is dict and any(delta.get(f) for f in _CONTENT_FIELDS):
                    return True
        return False


def _malformed(count: Callable[[], None], request_id: str) -> None:
    count()
    log.warning("upstream_malformed_event", request_id=request_id)


def _delta_text(data: bytes) -> bool:
    """A delta with non-empty `content` (the first such event commits a stream): one search,
    then the byte after the key's opening quote. `find`, not `in`: see protocols.sse.LF."""
    at = data.find(_CONTENT_KEY)
    return at >= 0 and not data.startswith(b'"', at + len(_CONTENT_KEY))


_CONTENT_KEY: Final = b'"content":"'


def _opening(data: bytes) -> bool:
    """The usual opening delta, with the role and no content: known without parsing it."""
    return data.find(_OPENING_DELTA) >= 0


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))[:200]
    return str(error)[:200]
