"""Virtual models and their routes: /api/admin/models (endpoints), their rules (service and
routes, shared with `llmrelay apply`), SQL (repository) and API shapes (schemas)."""
