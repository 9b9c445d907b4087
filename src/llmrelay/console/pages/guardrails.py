"""Guardrails: content policies (rules, each a detector with an action: audit, mask, block),
a dry run of a policy on a text typed here (never stored), the global binding, and the hits
(where a rule matched: never the matched text), over /guardrails and /settings/guardrails."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmrelay.console import periods
from llmrelay.console.forms import FormState, text, words
from llmrelay.console.listing import Column, field, listing
from llmrelay.console.web import (
    Console,
    Visit,
    form_visit,
    page,
    see_other,
    tenant_choices,
    visit,
)

#: What a rule's detector may be (the admin API names every choice when one is wrong).
DETECTORS = (
    "pii",
    "secrets",
    "email",
    "phone",
    "card",
    "iban",
    "regex",
    "words",
)
ACTIONS = ("audit", "mask", "block", "off")
SCOPES = ("request", "response", "both")
#: Empty rule rows a form offers for new rules.
NEW_ROWS = 2
COLUMNS = (
    Column("name", "Name", field("name")),
    Column("rules", "Rules", lambda g: len(g.get("rules") or ())),
    Column("updated", "Changed", field("updated_at")),
)
HIT_FILTERS = (
    "policy_id",
    "detector",
    "action",
    "location",
    "request_id",
    "since",
    "until",
    "cursor",
)


def _rules(fields: dict[str, str]) -> list[dict[str, Any]]:
    """The rule rows of a form (`rules.N.detector`...), blank rows left out."""
    found = []
    for index in range(100):
        prefix = f"rules.{index}."
        if prefix + "detector" not in fields:
            break
        detector = fields.get(prefix + "detector", "").strip()
        if not detector:
            continue
        rule: dict[str, Any] = {
            "detector": detector,
            "action": fields.get(prefix + "action") or "audit",
            "scope": fields.get(prefix + "scope") or "request",
        }
        for name in ("name", "placeholder", "pattern"):
            if text(fields, prefix + name):
                rule[name] = text(fields, prefix + name)
        if fields.get(prefix + "case_sensitive") == "on":
            rule["case_sensitive"] = True
        if detector == "words" and fields.get(prefix + "words", "").strip():
            rule["words"] = [w for w in fields[prefix + "words"].splitlines() if w.strip()]
        found.append(rule)
    return found


def _rows_of(rules: list[dict[str, Any]]) -> dict[str, str]:
    values: dict[str, str] = {}
    for index, rule in enumerate(rules):
        prefix = f"rules.{index}."
        for name in ("detector", "name", "action", "scope", "placeholder", "pattern"):
            values[prefix + name] = str(rule.get(name) or "")
        values[prefix + "case_sensitive"] = "on" if rule.get("case_sensitive") else ""
        values[prefix + "words"] = "\n".join(rule.get("words") or [])
    return values


def _row_count(values: dict[str, str]) -> int:
    return sum(1 for k in values if k.startswith("rules.") and k.endswith(".detector"))


async def _hits(found: Visit, params: dict[str, str], limit: int) -> tuple[list[Any], str | None]:
    query: dict[str, Any] = {k: v or None for k, v in params.items()}
    for name in ("since", "until"):
        moment = periods.parse(params.get(name))
        query[name] = periods.iso(moment) if moment else None
    answer = await found.admin.get("/guardrails/hits", {**query, "limit": limit})
    if not answer.ok:
        return [], None
    return answer.body["data"], answer.body["next_cursor"]


async def _show(found: Visit, form: FormState, status: int = 200, **extra: Any) -> Response:
    rows = (await found.read("/guardrails", {"limit": 500}))["data"]
    shown = listing(
        rows, found.request.query_params, COLUMNS, ("name", "description", "rules"), "name"
    )
    binding = await found.admin.get("/settings/guardrails")
    params = {n: found.request.query_params.get(n, "").strip() for n in HIT_FILTERS}
    hits, next_cursor = await _hits(found, params, 25)
    if not form.values:
        form.values = _rows_of([])
    return found.render(
        "guardrails.html",
        status,
        policies=shown.rows,
        names=sorted(r["name"] for r in rows),
        by_id={r["id"]: r["name"] for r in rows},
        listing=shown,
        form=form,
        rows=max(_row_count(form.values), 0) + NEW_ROWS,
        binding=binding.body if binding.ok else None,
        binding_etag=binding.header("etag") or "",
        hits=hits,
        hit_params=params,
        next_cursor=next_cursor,
        detectors=DETECTORS,
        actions=ACTIONS,
        scopes=SCOPES,
        tenants=await tenant_choices(found, "guardrails:write"),
        **extra,
    )


async def guardrails(console: Console, request: Request) -> Response:
    found = await visit(console, request, "guardrails:read")
    handed = found.take_flash() or {}
    return await _show(found, FormState(), notice=handed.get("notice"))


async def create(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "guardrails:write")
    body = {
        "name": text(fields, "name"),
        "description": text(fields, "description"),
        "rules": _rules(fields),
    }
    query = {"tenant_id": text(fields, "tenant_id")}
    answer = await found.admin.call("POST", "/guardrails", query=query, body=body)
    if not answer.ok:
        return await _show(
            found, FormState.failed(fields, answer, _rule_fields(fields)), answer.status
        )
    return see_other(f"/guardrails/{answer.body['id']}", found, {"notice": "Policy created."})


def _rule_fields(fields: dict[str, str]) -> dict[str, str]:
    """The admin API's `rules[N].x` paths as this form's `rules.M.x` inputs (blank rows were
    left out of the body, so N counts the rules sent)."""
    names: dict[str, str] = {}
    sent = 0
    for index in range(100):
        prefix = f"rules.{index}."
        if prefix + "detector" not in fields:
            break
        if not fields.get(prefix + "detector", "").strip():
            continue
        for name in ("detector", "name", "action", "scope", "placeholder", "pattern", "words"):
            names[f"rules[{sent}].{name}"] = prefix + name
        names[f"rules[{sent}]"] = prefix + "detector"
        sent += 1
    names["rules"] = "rules.0.detector"
    return names


async def _detail(
    found: Visit, guardrail_id: str, form: FormState, status: int = 200, **extra: Any
) -> Response:
    policy = await found.read(f"/guardrails/{guardrail_id}")
    if not form.values:
        form.values = {"name": policy["name"], "description": policy["description"] or ""}
        form.values |= _rows_of(policy["rules"])
    hits, _ = await _hits(found, {"policy_id": guardrail_id}, 25)
    return found.render(
        "guardrail.html",
        status,
        policy=policy,
        form=form,
        rows=_row_count(form.values) + 1,
        hits=hits,
        detectors=DETECTORS,
        actions=ACTIONS,
        scopes=SCOPES,
        **extra,
    )


async def guardrail(console: Console, request: Request) -> Response:
    found = await visit(console, request, "guardrails:read")
    handed = found.take_flash() or {}
    return await _detail(
        found,
        request.path_params["guardrail_id"],
        FormState(),
        notice=handed.get("notice"),
        tried=handed.get("tried"),
    )


async def change(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "guardrails:write")
    guardrail_id = request.path_params["guardrail_id"]
    body = {
        "name": text(fields, "name"),
        "description": text(fields, "description"),
        "rules": _rules(fields),
    }
    answer = await found.admin.call(
        "PATCH", f"/guardrails/{guardrail_id}", body=body, if_match=fields.get("version")
    )
    if not answer.ok:
        form = FormState.failed(fields, answer, _rule_fields(fields))
        return await _detail(found, guardrail_id, form, answer.status)
    return see_other(f"/guardrails/{guardrail_id}", found, {"notice": "Saved."})


async def delete(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "guardrails:write")
    guardrail_id = request.path_params["guardrail_id"]
    answer = await found.admin.call(
        "DELETE", f"/guardrails/{guardrail_id}", if_match=fields.get("version")
    )
    if not answer.ok:
        return await _detail(found, guardrail_id, FormState(message=answer.message), answer.status)
    return see_other("/guardrails", found, {"notice": "Policy deleted."})


async def try_it(console: Console, request: Request) -> Response:
    """A dry run on a typed text: what each rule finds and what the provider would get (the
    text is neither stored nor logged; the page shows it once)."""
    found, fields = await form_visit(console, request, "guardrails:read")
    guardrail_id = request.path_params["guardrail_id"]
    sample = fields.get("text", "")
    body = {"text": sample, "scope": fields.get("scope") or "request"}
    answer = await found.admin.call("POST", f"/guardrails/{guardrail_id}/test", body=body)
    if not answer.ok:
        form = FormState()
        form.errors["text"] = answer.message
        return await _detail(found, guardrail_id, form, answer.status, sample=sample)
    tried = {"text": sample, **answer.body}
    return see_other(f"/guardrails/{guardrail_id}", found, {"tried": tried})


async def binding(console: Console, request: Request) -> Response:
    found, fields = await form_visit(console, request, "guardrails:write")
    chosen = [name.partition(":")[2] for name, v in fields.items() if name.startswith("global:")]
    answer = await found.admin.call(
        "PUT",
        "/settings/guardrails",
        body={"global": chosen or words(fields.get("global"))},
        if_match=fields.get("etag") or None,
    )
    if not answer.ok:
        return await _show(found, FormState(message=answer.message), answer.status)
    return see_other("/guardrails", found, {"notice": "Global policies saved."})


def routes(console: Console) -> list[Route]:
    item = "/guardrails/{guardrail_id}"
    return [
        page(console, "/guardrails", guardrails),
        page(console, "/guardrails", create, ["POST"]),
        page(console, "/guardrails/global", binding, ["POST"]),
        page(console, item, guardrail),
        page(console, item, change, ["POST"]),
        page(console, item + "/delete", delete, ["POST"]),
        page(console, item + "/test", try_it, ["POST"]),
    ]
