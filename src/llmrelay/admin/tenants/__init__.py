"""/api/admin/tenants: the tenants themselves (a platform admin creates them; a tenant admin
reads and renames its own and can require two-factor). May import admin.access, admin.audit,
admin.kit and store."""
