"""Guardrail policies: /api/admin/guardrails (endpoints: policies, the dry run, the audit
records of hits) and /api/admin/settings/guardrails (the global binding); their rules
(service, shared with `llmrelay apply`), bindings to projects and keys (bindings), SQL
(repository, hits) and API shapes (schemas)."""
