"""Routing policies: /api/admin/policies (endpoints), their rules (service, shared with
`llmrelay apply`), SQL (repository) and API shapes (schemas)."""
