"""Gateway-wide settings: /api/admin/settings/routing (endpoints), the rules (service, shared
with `llmrelay apply`'s `routing` section) and API shapes (schemas)."""
