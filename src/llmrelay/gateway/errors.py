"""The gateway's one exception tree. Each error knows its HTTP status and a stable code;
protocols/ turns it into the client protocol's error body in one place. The root and
`InvalidRequest` live in protocols/errors.py (the translators raise them without knowing the
gateway); they are re-exported here under the names the gateway has always used."""

from __future__ import annotations

from llmrelay.protocols.errors import InvalidRequest, ProtocolError

__all__ = [
    "AuthenticationFailed",
    "BillingUnavailable",
    "ClientDisconnected",
    "GatewayError",
    "InvalidRequest",
    "NoCandidate",
    "NotFound",
    "PayloadTooLarge",
    "PaymentRequired",
    "PermissionDenied",
    "RequestIdReused",
    "RequestTimeout",
    "UpstreamFailed",
    "UpstreamTimeout",
]

#: The root of the tree is the protocols package's (protocols/errors.py): what a translator
#: or a request check there raises is a GatewayError here, caught and rendered alike.
GatewayError = ProtocolError


class AuthenticationFailed(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    type = "not_found_error"
    code = "not_found"


class PaymentRequired(GatewayError):
    """A prepaid tenant's balance cannot cover the request's reservation (or the model has
    no price to reserve by): 402, nothing sent to a provider."""

    status = 402
    type = "insufficient_quota"
    code = "insufficient_balance"


class RequestIdReused(GatewayError):
    """A prepaid request whose request id a billed request used before: serving it would
    go unbilled (reservations are once per request id)."""

    status = 409
    type = "invalid_request_error"
    code = "request_id_reused"


class BillingUnavailable(GatewayError):
    """The prepaid reservation could not be made (the database is unreachable): refused,
    never served unbilled. Retryable."""

    status = 503
    type = "service_unavailable"
    code = "billing_unavailable"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RequestTimeout(GatewayError):
    """The request body did not arrive within LLMRELAY_BODY_TIMEOUT_S: answered 408 and the
    connection closed (the rest of a trickling body is not worth reading)."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class UpstreamFailed(GatewayError):
    """Every candidate failed; the message summarises the last failure (no URLs, no secrets)."""

    status = 502
    type = "upstream_error"
    code = "upstream_failed"


class NoCandidate(GatewayError):
    """No route could be tried at all (all disabled or cooling down)."""

    status = 503
    type = "service_unavailable"
    code = "no_available_route"


class UpstreamTimeout(GatewayError):
    status = 504
    type = "timeout_error"
    code = "upstream_timeout"


class ClientDisconnected(Exception):
    """The client went away before the answer; recorded with status 499."""
