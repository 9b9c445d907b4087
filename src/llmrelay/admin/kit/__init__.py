"""What the resource domains of the admin API share. `problems`, `rows`, `lookups` and
`pages` are plain (no web framework: `llmrelay apply` runs the services that use them);
`http` and `scope` are the HTTP side (sessions, commits that bump and announce the config
generation, ETag / If-Match, tenant scoping). May import store, config (validation only),
admin.access and admin.errors (HTTP side only)."""
