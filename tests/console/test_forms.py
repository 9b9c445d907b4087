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
    assert state.errors == {"limits.rpm": "too small"}  # the input is right there: no path
    assert state.values == {"limits.rpm": "0"}  # never the token
    elsewhere = {"error": {"message": "no", "type": "conflict", "field": "routes[0].provider"}}
    moved = FormState.failed(
        {"provider": "x"}, Answer(409, (), elsewhere), {"routes[0].provider": "provider"}
    )
    assert moved.errors == {"provider": "no"}
    unplaced = FormState.failed({"name": "x"}, Answer(403, (), {"error": {"message": "role"}}))
    assert unplaced.message == "role"
    assert unplaced.errors == {}


def test_every_error_goes_to_its_field_in_plain_words() -> None:
    """Several broken rules in one submit: each shown next to its input, none as the
    schema's jargon; one naming no input of the form goes above it."""
    error = {
        "error": {
            "message": "limits.rpm: Input should be a valid integer, unable to parse string",
            "type": "invalid_request",
            "field": "limits.rpm",
            "errors": [
                {"field": "limits.rpm", "message": "limits.rpm: Input should be a valid integer"},
                {"field": "name", "message": "name: String should match pattern '^[a-z]+$'"},
                {
                    "field": "limits.tpm",
                    "message": "limits.tpm: Input should be greater than or equal to 1",
                },
                {"field": "routes", "message": "routes: List should have at least 1 item"},
            ],
        }
    }
    values = {"limits.rpm": "lots", "limits.tpm": "0", "name": "A B"}
    state = FormState.failed(values, Answer(400, (), error))
    assert state.errors == {
        "limits.rpm": "must be a whole number, like 60",
        "name": "has characters that are not allowed here: use letters, digits and dashes",
        "limits.tpm": "must be 1 or more",
    }
    assert state.message == "needs at least 1"
    assert "Input should" not in str(state.errors)


def test_an_error_on_a_list_member_is_shown_next_to_the_list() -> None:
    error = {"error": {"message": "scopes[1]: Input should be 'chat'", "field": "scopes[1]"}}
    answer = Answer(400, (), error)
    state = FormState.failed({"scopes": "chat chatt", "name": "k"}, answer)
    assert state.errors == {"scopes": "must be chat"}
    assert state.message is None
