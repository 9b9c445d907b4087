"""What the data plane asks of the durable jobs, as an interface: queue a background response
or a generation, read one back, cancel one. jobs/submissions.py implements it and stack.py
hands it to the dispatcher (`Dispatcher.durable`), so the data plane never imports jobs/ (which
imports the data plane to run its model calls).

Every method raises gateway errors (a 400 naming the field, a 404), which the handler answers
in its protocol's shape; `None` from a read means "no such id for this project": a 404, as
OpenAI answers for an id it does not hold.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, Protocol

from llmrelay.gateway.ingress import RequestContext
from llmrelay.snapshot.model import KeySnap, ModelSnap

#: `resp_` + a job id (32 hex digits): a background response's public id. OpenAI's own ids
#: are longer, so an id a provider gave out is never taken for one of these.
BACKGROUND_RESPONSE_ID: Final = re.compile(r"resp_[0-9a-f]{32}")
#: `gen_` + a job id: a queued generation's public id.
GENERATION_ID: Final = re.compile(r"gen_[0-9a-f]{32}")


class DurableJobs(Protocol):
    async def submit_response(
        self,
        principal: KeySnap,
        key_digest: str,
        model: ModelSnap,
        payload: dict[str, Any],
        context: RequestContext,
        guard_hits: Sequence[tuple[Any, ...]] = (),
    ) -> dict[str, Any]:
        """Queue a background response; the Response object in status `queued`. `payload`
        has been through the key's guardrails; `guard_hits` are their hit rows, which the
        job's record carries."""
        ...

    async def response(
        self, principal: KeySnap, response_id: str, *, cancel: bool
    ) -> dict[str, Any] | None:
        """A background response as it stands (after asking to cancel it, with `cancel`)."""
        ...

    async def response_events(
        self, principal: KeySnap, response_id: str, *, starting_after: int | None
    ) -> AsyncIterator[dict[str, Any]] | None:
        """A background response's stream events after `starting_after`, until it is done
        (as the Responses API streams one)."""
        ...

    async def submit_generation(
        self,
        principal: KeySnap,
        key_digest: str,
        model: ModelSnap,
        request: dict[str, Any],
        webhook_url: str,
        context: RequestContext,
        guard_hits: Sequence[tuple[Any, ...]] = (),
    ) -> dict[str, Any]:
        """Queue a generation whose outcome goes to `webhook_url` (checked here: 400 naming
        `webhook_url` when the URL may not be called); the generation object, `queued`."""
        ...

    async def generation(self, principal: KeySnap, generation_id: str) -> dict[str, Any] | None:
        """A queued generation as it stands."""
        ...


def is_background_response(response_id: str) -> bool:
    return BACKGROUND_RESPONSE_ID.fullmatch(response_id) is not None
