"""Providers and their model inventory: /api/admin/providers (endpoints), their rules and
credential sealing (service, shared with `llmrelay apply`), SQL (repository), API shapes."""
