"""Webhooks: events about a project's jobs sent to the URL its client gave, signed with the
project's secret (signing.py), queued as one delivery row and one durable job each
(events.py), sent with retries and every attempt logged (delivery.py), never to an internal
address (ssrf.py, checked at submission and again at every attempt)."""
