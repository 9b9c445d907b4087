"""Mid-stream rescue of the streams whose every event is parsed: Anthropic Messages, OpenAI
Responses and Gemini's streamGenerateContent (a model's `stream_rescue`; chat's is
gateway/rescue.py, whose route choice this shares).

The relay's events are read into a protocol's `EventTranscript` (rescue_messages.py,
rescue_responses.py, rescue_gemini.py) as they reach the client. When the stream breaks or
stalls after content began and the transcript says where the answer stopped exactly, the
request is put in its chat form with the text sent as a final assistant message and sent to
a route that continues one (rescue_point.can_continue). Its chat stream is read by a
`Sequel`, which writes only the new text as the client's own protocol's events, continuing
the same ones (the same message, item or response ids, block and output indexes, sequence
numbers), and ends it as the protocol ends a stream, with one usage: what every route that
served a part of the answer billed (the broken parts' reported usage, or an estimate where
they reported none). The relay reads the sequel's events as it read the first route's, so
its records, usage and end work as they always do.

A refusal (anything but plain text sent, the answer finished, no text yet, a request that
has no chat form) ends the stream with today's error event, as does a rescue no route
takes: two answers that might disagree are never spliced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.rescue import Rescuer, rescuer_for, sum_usage
from llmrelay.gateway.rescue_point import MAX_RESCUES, NOT_TEXT, Overlap, cut
from llmrelay.gateway.stream_relay import ParsedEventRelay
from llmrelay.metering.estimate import prompt_tokens
from llmrelay.metering.usage import Usage
from llmrelay.protocols.sse import SSEParser
from llmrelay.protocols.translation import TranslationError
from llmrelay.providers.base import UpstreamResponse
from llmrelay.providers.errors import (
    UpstreamError,
    UpstreamErrorEvent,
    UpstreamProtocolError,
    UpstreamTimeoutError,
)
from llmrelay.providers.headers import FORWARDED
from llmrelay.snapshot.model import ModelSnap, RouteSnap

if TYPE_CHECKING:
    from llmrelay.gateway.dispatch import ModelCall

log = structlog.get_logger(__name__)


class EventTranscript:
    """What the client was sent of a one-answer stream (a protocol's subclass reads its
    events in `_read`), and how that stream goes on: a continuation's text and end written
    as the protocol's events (`text_event`, `closing`).

    Events are held until the relay has taken their whole chunk (`commit`): when taking it
    raised, none of them reached the client, and `drop` forgets them."""

    def __init__(self) -> None:
        self._pending: list[tuple[str | None, dict[str, Any]]] = []
        self.pieces: list[str] = []
        #: False once anything was sent that a prefill cannot carry exactly.
        self.exact = True
        #: The answer reached its end (or a block that ends its text) before it broke.
        self.finished = False
        #: Content events sent (about a token each: a broken part's output estimate).
        self.texts = 0
        #: The usage the current route reported so far, in chat form (None: none yet).
        self.reported: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def see(self, name: str | None, event: dict[str, Any]) -> None:
        self._pending.append((name, event))

    def commit(self) -> None:
        for name, event in self._pending:
            self._read(name, event)
        self._pending.clear()

    def drop(self) -> None:
        self._pending.clear()

    def refusal(self, rescues: int) -> str | None:
        """Why the stream cannot be rescued (None: it can)."""
        if rescues >= MAX_RESCUES:
            return "rescued too often"
        if not self.exact:
            return "not plain text: the continuation point cannot be verified"
        if self.finished:
            return "the answer had finished"
        if not self.text.strip():
            return "no text yet"
        return None

    def add(self, text: str) -> None:
        """Text sent: part of the answer a continuation goes on from."""
        if text:
            self.pieces.append(text)
            self.texts += 1

    # -- what a protocol decides -----------------------------------------------------------

    def _read(self, name: str | None, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def chat_form(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The client's request as a chat request (TranslationError: it has none)."""
        raise NotImplementedError

    def text_event(self, text: str) -> bytes:
        """The event that carries `text` of the continuation on."""
        raise NotImplementedError

    def closing(self, text: str, finish: str, usage: dict[str, Any]) -> bytes:
        """The events that end the stream: the answer's whole `text`, the continuation's
        chat `finish` reason, and `usage` (chat form: every route's summed)."""
        raise NotImplementedError


class Sequel:
    """A continuation's chat stream read as the client's protocol (an UpstreamResponse the
    relay reads in place of the broken one): its new text, then the protocol's end. Anything
    but text (a tool call, reasoning, a second choice) fails the route."""

    __slots__ = (
        "_before",
        "_earlier",
        "_estimate",
        "_finish",
        "_inner",
        "_over",
        "_overlap",
        "_parser",
        "_said",
        "_transcript",
        "_usage",
        "status",
    )

    def __init__(
        self,
        inner: UpstreamResponse,
        transcript: EventTranscript,
        overlap: Overlap,
        *,
        before: str,
        earlier: dict[str, int],
        estimate: Callable[[], int],
    ) -> None:
        self._inner = inner
        self.status = inner.status
        self._transcript = transcript
        self._overlap = overlap
        self._before = before
        self._earlier = earlier
        #: The continuation's prompt by the tokenizer (when it reports no usage).
        self._estimate = estimate
        self._parser = SSEParser()
        self._said: list[str] = []
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._over = False

    def header(self, name: str) -> str | None:
        return self._inner.header(name)

    async def read(self) -> bytes:
        return await self._inner.read()

    async def next_chunk(self) -> bytes:
        while not self._over:
            chunk = await self._inner.next_chunk()
            out: list[bytes] = []
            if not chunk:
                self._end(out)
            else:
                for data in self._parser.feed_data(chunk):
                    if data == b"[DONE]":
                        self._end(out)
                        break
                    self._take(data, out)
            if out:
                return b"".join(out)
        return b""

    def release(self) -> None:
        self._inner.release()

    def _end(self, out: list[bytes]) -> None:
        """The continuation's stream is over: the protocol's end once it finished (else
        nothing: the relay sees a stream that ended before its finish)."""
        self._over = True
        finish = self._finish
        if finish is None:
            return
        usage = self._usage
        if usage is None:  # none reported: estimated as for any stream without usage
            usage = {"prompt_tokens": self._estimate(), "completion_tokens": len(self._said)}
        total = sum_usage(self._earlier, usage)
        text = self._before + "".join(self._said)
        out.append(self._transcript.closing(text, finish, total))

    def _take(self, data: bytes, out: list[bytes]) -> None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if type(event) is not dict:
            return
        if "error" in event:
            raise UpstreamErrorEvent(str(event.get("error"))[:200])
        usage = event.get("usage")
        if usage and type(usage) is dict:
            self._usage = usage
        for choice in event.get("choices") or ():
            if type(choice) is not dict:
                continue
            if choice.get("index", 0) != 0:
                raise UpstreamProtocolError("the continuation has several choices")
            delta = choice.get("delta")
            if type(delta) is dict:
                if any(delta.get(field) for field in NOT_TEXT):
                    raise UpstreamProtocolError("the continuation is not text")
                content = delta.get("content")
                if type(content) is str and content:
                    new = self._overlap.take(content)
                    if new:
                        self._said.append(new)
                        out.append(self._transcript.text_event(new))
            reason = choice.get("finish_reason")
            if reason is not None:
                self._overlap.finish()
                self._finish = str(reason)


class EventRescue:
    """One stream's rescues: given to its relay as `_rescue` (gateway/stream_relay.py)."""

    def __init__(
        self,
        relay: ParsedEventRelay,
        transcript: EventTranscript,
        *,
        payload: dict[str, Any],
        forwarded: Mapping[str, str],
        record: CallRecord,
        rescuer: Rescuer,
        deadlines: Deadlines,
        count: Callable[[str], None],
    ) -> None:
        self._relay = relay
        self._transcript = transcript
        self._payload = payload
        # Only the gateway's own headers: the client's protocol headers mean nothing to the
        # chat call that continues (and each adapter sends its own version headers).
        self._forwarded = {k: v for k, v in forwarded.items() if k not in FORWARDED}
        self._record = record
        self._rescuer = rescuer
        self._deadlines = deadlines
        self._count = count
        self._rescues = 0
        #: The usage of the parts before the current route's (chat form).
        self._earlier: dict[str, int] = {}
        #: Content events sent before the current route began.
        self._texts_before = 0
        self._sent = ""
        self._chat: dict[str, Any] = {}

    async def attempt(self, failure: UpstreamError) -> bool:
        """Continue the stream from another route, or refuse (False: it ends as today)."""
        transcript = self._transcript
        transcript.drop()
        relay = self._relay
        record = self._record
        refused = transcript.refusal(self._rescues)
        if refused is None:
            try:
                self._chat = transcript.chat_form(self._payload)
            except TranslationError as untranslatable:
                refused = f"the request has no chat form: {untranslatable.message}"
        if refused is not None:
            log.info("stream_rescue_refused", request_id=record.request_id, reason=refused)
            self._count("refused")
            return False
        reason = "stall" if isinstance(failure, UpstreamTimeoutError) else "break"
        lost = "stream_stalled" if reason == "stall" else "stream_interrupted"
        part = self._add_earlier()
        record.log_part("stream", 200, lost, record.latency_ms(), part)  # (since it began)
        relay.let_go()
        self._rescues += 1
        prior = record.usage
        record.usage = None  # the continuation's end carries every part's usage
        self._sent = text = transcript.text
        continued = await self._rescuer(self.continue_on, text, self._chat, self._forwarded)
        if not continued:
            record.usage = prior
        log.info(
            "stream_rescued" if continued else "stream_rescue_failed",
            request_id=record.request_id,
            failure=reason,
        )
        self._count("rescued" if continued else "failed")
        return continued

    def _add_earlier(self) -> Usage:
        """The broken part's usage: what its route reported, else estimated as the record
        would (the prompt by the tokenizer, a token per content event it sent)."""
        transcript = self._transcript
        reported = transcript.reported or {}
        prompt = reported.get("prompt_tokens")
        if type(prompt) is not int or prompt <= 0:
            prompt = prompt_tokens(self._chat)
        completion = reported.get("completion_tokens")
        sent = transcript.texts - self._texts_before
        if type(completion) is not int or completion < sent:
            completion = sent
        earlier = self._earlier
        earlier["prompt_tokens"] = earlier.get("prompt_tokens", 0) + prompt
        earlier["completion_tokens"] = earlier.get("completion_tokens", 0) + completion
        self._texts_before = transcript.texts
        transcript.reported = None
        return Usage(input=prompt, output=completion)

    async def continue_on(self, route: RouteSnap, response: UpstreamResponse) -> ParsedEventRelay:
        """The finisher of a continuation attempt: the relay reads `response` (as a sequel
        of the stream) to its first new content, within the route's first-token limit."""
        cutting = cut(self._sent, route.provider)
        assert cutting is not None  # the rescuer asks only routes it can be cut for
        chat = self._chat
        sequel = Sequel(
            response,
            self._transcript,
            Overlap(cutting[1], cutting[2]),
            before=self._sent,
            earlier=dict(self._earlier),
            estimate=lambda: prompt_tokens(chat),
        )
        relay = self._relay
        relay.resume(route, sequel)
        await relay.prime(self._deadlines)
        return relay


def event_rescue(
    call: ModelCall, model: ModelSnap
) -> Callable[[ParsedEventRelay, EventTranscript], None]:
    """What dispatch gives each relay of `call` for a model with `stream_rescue`: the
    transcript that reads its events and the rescue asked when it fails."""
    runtime = call.runtime
    rescuer = rescuer_for(call, model)
    metrics = runtime.metrics

    def count(outcome: str) -> None:
        metrics.stream_rescues.labels(outcome).inc()

    def attach(relay: ParsedEventRelay, transcript: EventTranscript) -> None:
        rescue = EventRescue(
            relay,
            transcript,
            payload=call.payload,
            forwarded=call.forwarded,
            record=call.record,
            rescuer=rescuer,
            deadlines=runtime.deadlines,
            count=count,
        )
        relay.tap(transcript, rescue.attempt)

    return attach
