"""Form fields to admin bodies: shapes only (no value judged), and errors back on fields."""

from __future__ import annotations

from llmrelay.console.admin_client import Answer
from llmrelay.console.forms import FormState, body_of

SPEC = {
    "name": "text",
    "models": "list",
    "limits.rpm": "text",
    "limits.tpm": "text",
    "disabled": "bool",
    "lines": "lines",
}


def test_a_create_leaves_empty_inputs_out() -> None:
    fields = {
        "name": " a ",
        "models": "x, y\nz",
        "limits.rpm": "lots",
        "limits.tpm": "",
        "disabled": "on",
        "lines": "one\n\n two \n",
    }
    assert body_of(fields, SPEC, clear_empty=False) == {  # type: ignore[arg-type]
        "name": "a",
        "models": ["x", "y", "z"],
        "limits": {"rpm": "lots"},  # the admin API judges the number
        "disabled": True,
        "lines": ["one", "two"],
    }


def test_a_change_clears_empty_inputs_and_replaces_groups_whole() -> None:
    fields = {"name": "", "models": "", "limits.rpm": "", "limits.tpm": "5"}
    assert body_of(fields, SPEC, clear_empty=True) == {  # type: ignore[arg-type]
        "name": None,
        "models": None,
        "limits": {"tpm": "5"},
        "disabled": False,
        "lines": None,
    }


def test_an_error_goes_next_to_its_field_or_above_the_form() -> None:
    error = {
        "error": {
            "message": "limits.rpm: too small",
            "type": "invalid_request",
            "field": "limits.rpm",
        }
    }
    values = {"limits.rpm": "0", "csrf_token": "t"}
    state = FormState.failed(values, Answer(400, (), error))
    assert state.errors == {"limits.rpm": "limits.rpm: too small"}
    assert state.values == {"limits.rpm": "0"}  # never the token
    elsewhere = {"error": {"message": "no", "type": "conflict", "field": "routes[0].provider"}}
    moved = FormState.failed(
        {"provider": "x"}, Answer(409, (), elsewhere), {"routes[0].provider": "provider"}
    )
    assert moved.errors == {"provider": "no"}
    unplaced = FormState.failed({"name": "x"}, Answer(403, (), {"error": {"message": "role"}}))
    assert unplaced.message == "role"
    assert unplaced.errors == {}
