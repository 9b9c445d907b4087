"""What can go wrong talking to a provider, independent of the HTTP library underneath."""

from __future__ import annotations


class UpstreamError(Exception):
    """Base: the provider could not be reached or did not answer in time."""


class UpstreamConnectError(UpstreamError):
    """Connection refused, reset, DNS failure, TLS failure, or the connection dropped."""


class UpstreamAddressRefused(UpstreamConnectError):
    """The outbound address policy refused the provider's address (outbound/); no connection
    was made. The route is misconfigured: no retry, the next candidate is tried, and the
    breaker is left alone (the refusal costs nothing, and names its rule each time)."""


class UpstreamTimeoutError(UpstreamError):
    """No answer within a time limit; `phase` says which (connect, first_byte, idle)."""

    def __init__(self, phase: str, seconds: float) -> None:
        super().__init__(f"no {phase.replace('_', ' ')} within {seconds:g}s")
        self.phase = phase
        self.seconds = seconds


class UpstreamProtocolError(UpstreamError):
    """The provider answered something that is not its protocol (bad JSON, an error event
    before any content, a stream that ended with nothing in it)."""


class UpstreamErrorEvent(UpstreamProtocolError):
    """A stream's error event. The message quotes the provider's, for the client; `reason`
    does not, for logs: a provider's error text can echo the prompt back."""

    reason = "provider sent an error event"

    def __init__(self, provider_message: str) -> None:
        super().__init__(f"{self.reason}: {provider_message}")


class UpstreamUnavailable(UpstreamError):
    """The provider cannot take calls now, and no call was made: its subscription's usage
    limit is reached until `retry_at` (Unix seconds), or no account is signed in for it
    (openai_codex). The next candidate is tried at once; the breaker is left alone (the
    provider is not failing, it is resting)."""

    def __init__(self, message: str, retry_at: float | None = None) -> None:
        super().__init__(message)
        self.retry_at = retry_at
