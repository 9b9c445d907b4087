"""GET /api/admin/audit: reading the audit log (admin/audit.py writes it). May import
admin.access, admin.kit and store."""
