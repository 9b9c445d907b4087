"""Limits and budgets of projects and keys: /api/admin/projects/{id}/limits and
/api/admin/keys/{id}/limits (endpoints, schemas). Their own permission (limits:*: a billing
role sets budgets without managing keys); the rules are the project and key services'."""
