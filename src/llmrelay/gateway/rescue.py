"""Mid-stream rescue of an OpenAI chat stream (a model's `stream_rescue`, off by default).

A committed stream that breaks (connection lost, an error event) or stalls (no event within
the provider's `stream_idle_timeout_s`) normally ends with an in-band error event. With
rescue on, the relay keeps a transcript of what the client was sent, and on such a failure
asks another route to continue the answer: the text sent is given to it as a final assistant
message (an Anthropic prefill; `continue_final_message` on a vLLM server; a final `model`
turn for Gemini, checked: rescue_point.cut), and only the new tokens go on to the client,
rewritten into the same event sequence (the first route's `id`, `created`, the virtual
model, choice index 0) and with one final usage, the sum of both parts (the broken part's
estimated: it reported none); the record bills each part at its route's price
(CallRecord.log_part). The other protocols' streams: gateway/rescue_events.py.

A rescue is refused, and the stream ends with today's error, whenever the continuation point
cannot be verified exactly: anything but plain text was sent (tool calls, a refusal,
reasoning, log probabilities), more than one choice, the answer had already finished, or no
text came yet. Where no route can continue (none can take a prefill, or each refuses), the
same error ends it. The transcript costs a parse of every event the client gets: the price
of opting in; with rescue off the relay is the plain one (gateway/relay.py) and nothing of
this runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from llmrelay.deadlines import Deadlines
from llmrelay.gateway.call import CallRecord
from llmrelay.gateway.errors import GatewayError
from llmrelay.gateway.executor import Finisher, candidates
from llmrelay.gateway.relay import ChatStreamRelay
from llmrelay.gateway.rescue_point import (
    NOT_TEXT,
    Overlap,
    Transcript,
    can_continue,
    continuation_payload,
    cut,
    refusal,
)
from llmrelay.metering.estimate import prompt_tokens
from llmrelay.metering.usage import Usage
from llmrelay.protocols.openai import ModelRename
from llmrelay.protocols.sse import SSEParser
from llmrelay.providers.base import Operation, UpstreamResponse
from llmrelay.providers.errors import (
    UpstreamError,
    UpstreamErrorEvent,
    UpstreamProtocolError,
    UpstreamTimeoutError,
)
from llmrelay.providers.presets import reports_stream_usage
from llmrelay.snapshot.model import ModelSnap, RouteSnap

if TYPE_CHECKING:
    from llmrelay.gateway.dispatch import ModelCall

log = structlog.get_logger(__name__)

#: Asked to continue a stream whose client was sent `text` (a route is given `continue_on`
#: as its finisher, the request in its chat form with the text as a prefill, and the
#: forwarded headers): whether a route now does (`continue_on` switched the relay to it).
Rescuer = Callable[[Finisher[Any], str, dict[str, Any], Mapping[str, str]], Awaitable[bool]]


class RescuingChatStreamRelay(ChatStreamRelay):
    """The chat relay of a model with `stream_rescue`: the same stream, with a transcript
    and, on a failure after the first byte, a continuation from another route."""

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
        rescuer: Rescuer,
        prompt_tokens: Callable[[], int],
        deadlines: Deadlines,
        count: Callable[[str], None],
        payload: dict[str, Any],
        forwarded: Mapping[str, str],
    ) -> None:
        super().__init__(
            route,
            response,
            request_id=request_id,
            choices=choices,
            usage_requested=usage_requested,
            record=record,
            usage_coming=usage_coming,
            rename=rename,
            on_malformed=on_malformed,
            on_end=on_end,
        )
        self._transcript = Transcript()
        self._rescuer = rescuer
        #: The client's request and headers, for the continuation's request.
        self._call_payload = payload
        self._forwarded = forwarded
        self._prompt_tokens = prompt_tokens
        self._deadlines = deadlines
        #: Counts a rescue's outcome (llmrelay_stream_rescues_total).
        self._count = count
        self._rescues = 0
        #: After a rescue: the continuation's events are parsed and rewritten (`_continue`).
        self._continuing = False
        #: The text the client was sent when the stream failed (the continuation's start).
        self._sent = ""
        #: What the current continuation must begin with before its new text (rescue_point.cut).
        self._overlap = Overlap("", False)
        #: The usage of the parts before the current route's (estimated: they broke off).
        self._earlier: dict[str, int] = {}
        self._rescue = self._try_rescue

    async def _try_rescue(self, failure: UpstreamError) -> bool:
        """Continue the stream from another route, or refuse (False: it ends as today)."""
        transcript = self._transcript
        refused = refusal(transcript, self._choices, self._rescues)
        reason = "stall" if isinstance(failure, UpstreamTimeoutError) else "break"
        if refused is not None:
            log.info("stream_rescue_refused", request_id=self._request_id, reason=refused)
            self._count("refused")
            return False
        record = self._record
        lost = "stream_stalled" if reason == "stall" else "stream_interrupted"
        part = self._add_earlier(transcript.texts)
        record.log_part("stream", 200, lost, record.latency_ms(), part)  # (since it began)
        if self._deadline is not None:
            self._deadline.stop()
        self._response.release()
        self._rescues += 1
        self._sent = text = transcript.text
        call = self._call_payload
        continued = await self._rescuer(self.continue_on, text, call, self._forwarded)
        log.info(
            "stream_rescued" if continued else "stream_rescue_failed",
            request_id=self._request_id,
            failure=reason,
        )
        self._count("rescued" if continued else "failed")
        return continued

    def _add_earlier(self, completion: int) -> Usage:
        """The broken part's usage (returned), estimated as the record would (a chat stream
        reports usage only at its end): its prompt by the tokenizer, a token per content
        event it sent; added to the earlier parts' (`completion`: every part's events)."""
        earlier = self._earlier
        prompt = self._prompt_tokens()
        part = Usage(input=prompt, output=completion - earlier.get("completion_tokens", 0))
        earlier["prompt_tokens"] = earlier.get("prompt_tokens", 0) + prompt
        earlier["completion_tokens"] = completion
        return part

    async def continue_on(
        self, route: RouteSnap, response: UpstreamResponse
    ) -> RescuingChatStreamRelay:
        """The finisher of a continuation attempt: take `response` as the stream's source and
        read it to its first new content (within the route's first-token limit)."""
        self._route = route
        self._response = response
        self._parser = SSEParser()
        self._continuing = True
        cutting = cut(self._sent, route.provider)
        assert cutting is not None  # the rescuer asks only routes it can be cut for
        self._overlap = Overlap(cutting[1], cutting[2])  # each attempt starts afresh
        self._facts = None
        self._primed = []
        self._finished.clear()
        self._usage_seen = False
        self._done = False
        await self.prime(self._deadlines)
        return self

    def _take(self, chunk: bytes, out: list[bytes], *, priming: bool) -> bool:
        """The chunk's events as the plain relay takes them (or, after a rescue, rewritten),
        and into the transcript: what `_take` adds to `out` reaches the client unless it
        raises (then the transcript has none of it either)."""
        start = len(out)
        if self._continuing:
            content = self._take_continued(chunk, out)
        else:
            content = super()._take(chunk, out, priming=priming)
        transcript = self._transcript
        for index in range(start, len(out)):
            transcript.feed(out[index])
        return content

    def _take_continued(self, chunk: bytes, out: list[bytes]) -> bool:
        content = False
        for _name, data in self._parser.feed(chunk):
            if data == b"[DONE]":
                self._done = True
                break
            passed = self._continue(data)
            if passed is not None:
                out.append(b"data: " + passed + b"\n\n")
                content = True
            if self._complete:
                break
        return content

    def _continue(self, data: bytes) -> bytes | None:
        """One event of the continuation, as the client gets it (None: nothing to pass)."""
        try:
            event = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            event = None
        if type(event) is not dict:
            if data:
                self._malformed()
            return None
        if "error" in event:
            raise UpstreamErrorEvent(str(event.get("error"))[:200])
        self._taken += 1
        kept = [c for c in (event.get("choices") or []) if self._keep(c)]
        usage = event.get("usage")
        total = None
        if usage and type(usage) is dict:
            self._usage_seen = True
            total = sum_usage(self._earlier, usage)
            self._record.take_usage(total)
        if not kept and (total is None or not self._forward_usage):
            return None
        transcript = self._transcript
        event["id"] = transcript.id
        event["created"] = transcript.created
        event["model"] = self._virtual_model
        if transcript.fingerprint is not None:
            event["system_fingerprint"] = transcript.fingerprint
        event["choices"] = kept
        if total is not None or "usage" in event:
            event["usage"] = total if self._forward_usage else None
        return orjson.dumps(event)

    def _keep(self, choice: Any) -> bool:
        """Whether a continuation's choice goes on (rewritten in place): its new text or its
        finish. Anything but text means the route did not continue the answer: refused."""
        if type(choice) is not dict:
            return False
        delta = choice.get("delta")
        if type(delta) is not dict:
            delta = {}
        if any(delta.get(field) for field in NOT_TEXT):
            raise UpstreamProtocolError("the continuation is not text")
        delta.pop("role", None)
        content = delta.get("content")
        if type(content) is str and content:
            content = self._overlap.take(content)
            delta["content"] = content
        finished = choice.get("finish_reason") is not None
        if finished:
            self._overlap.finish()
            self._finished.add(0)
        choice["index"] = 0
        choice["delta"] = delta
        return finished or bool(content)


def sum_usage(earlier: dict[str, int], usage: dict[str, Any]) -> dict[str, Any]:
    """The continuation's usage plus the earlier parts' (one final usage for the client)."""
    prompt = _count(usage.get("prompt_tokens")) + earlier.get("prompt_tokens", 0)
    completion = _count(usage.get("completion_tokens")) + earlier.get("completion_tokens", 0)
    total = {**usage, "prompt_tokens": prompt, "completion_tokens": completion}
    total["total_tokens"] = prompt + completion
    return total


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def rescuer_for(call: ModelCall, model: ModelSnap) -> Rescuer:
    """How a stream of `call` to `model` is continued, whatever the client's protocol: on
    each route the call may use (its routing policy and needs as for the first attempt) that
    can continue and has not broken off this stream, in the model's order, through the
    executor as a chat call (so breakers, retries and the attempts' records apply); the
    first whose continuation starts wins."""
    runtime = call.runtime
    record = call.record
    broken: set[str | None] = set()

    async def rescue(
        continue_on: Finisher[Any], text: str, chat: dict[str, Any], forwarded: Mapping[str, str]
    ) -> bool:
        executor = runtime.executor
        broken.add(record.route_id)
        for route in candidates(model, None, call.policy, call.needs):
            provider = route.provider
            if route.id in broken or not can_continue(provider):
                continue
            cutting = cut(text, provider)
            if cutting is None:
                continue
            payload = continuation_payload(chat, provider, cutting[0])
            try:
                await executor.execute(
                    Operation.CHAT,
                    model,
                    [route],
                    payload,
                    forwarded,
                    record,
                    continue_on,
                    deadline_at=executor.clock() + model.deadline_s,
                )
            except GatewayError as refused:
                log.info(
                    "stream_rescue_route_failed",
                    request_id=record.request_id,
                    route=route.id,
                    code=refused.code,
                )
                broken.add(route.id)
                continue
            return True
        return False

    return rescue


def rescuing_primer(
    call: ModelCall,
    model: ModelSnap,
    rename: ModelRename,
    usage_requested: bool,
    on_end: Callable[[CallRecord], None],
) -> Callable[[RouteSnap, UpstreamResponse], Awaitable[ChatStreamRelay]]:
    """dispatch's chat stream finisher for a model with `stream_rescue` (one choice): the
    same relay as without it, with a transcript and a rescuer (see the module)."""
    runtime = call.runtime
    payload = call.payload
    record = call.record
    rescuer = rescuer_for(call, model)
    metrics = runtime.metrics

    async def prime(route: RouteSnap, response: UpstreamResponse) -> ChatStreamRelay:
        provider = route.provider
        slug = provider.slug
        relay = RescuingChatStreamRelay(
            route,
            response,
            request_id=record.request_id,
            choices=1,
            usage_requested=usage_requested,
            usage_coming=reports_stream_usage(provider.type, provider.preset),
            record=record,
            rename=rename,
            on_malformed=lambda: metrics.malformed_events.labels(slug).inc(),
            on_end=on_end,
            rescuer=rescuer,
            prompt_tokens=lambda: prompt_tokens(payload),
            deadlines=runtime.deadlines,
            count=lambda outcome: metrics.stream_rescues.labels(outcome).inc(),
            payload=payload,
            forwarded=call.forwarded,
        )
        await relay.prime(runtime.deadlines)
        return relay

    return prime
