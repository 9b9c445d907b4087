"""Durable jobs as operators see them: /api/admin/jobs (list, one, cancel). Sealed payloads
and results are never shown, only that they exist. May import admin.access, admin.kit, jobs
(the queue's cancel) and store."""
