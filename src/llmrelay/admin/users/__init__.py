"""/api/admin/users and /api/admin/tenants/{id}/members: console accounts and their roles in
tenants. Removing a member or disabling a user ends that user's sessions at once. May import
admin.access, admin.audit, admin.identity, admin.kit and store."""
