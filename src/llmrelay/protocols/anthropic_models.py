"""Anthropic's shapes for what the gateway itself answers to Anthropic clients: the model
list and error bodies (`{"type":"error","error":{"type","message"},"request_id"}`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from llmrelay.protocols import anthropic
from llmrelay.protocols.errors import ProtocolError
from llmrelay.snapshot.model import ModelSnap


def error_body(error: ProtocolError, request_id: str) -> bytes:
    return anthropic.error_body(
        anthropic.error_type_for_status(error.status), error.message, request_id=request_id
    )


def model_list(models: Sequence[ModelSnap]) -> dict[str, Any]:
    """GET /v1/models as Anthropic answers it (one page: `has_more` is false)."""
    data = [
        {
            "type": "model",
            "id": m.name,
            "display_name": m.name,
            "created_at": datetime.fromtimestamp(m.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for m in models
    ]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
