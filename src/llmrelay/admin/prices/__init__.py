"""Price versions of virtual models: /api/admin/models/{id}/prices (endpoints), their rules
(service, shared with `llmrelay apply`), SQL (repository) and API shapes (schemas)."""
