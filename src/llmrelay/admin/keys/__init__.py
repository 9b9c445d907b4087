"""API keys: /api/admin/projects/{id}/keys and /api/admin/keys (endpoints), their rules
(service, shared with `llmrelay apply`), SQL (repository) and API shapes (schemas)."""
