"""What the resource domains of the admin API share. `problems`, `rows`, `lookups` and
`pages` are plain (no web framework: `llmrelay apply` runs the services that use them);
`http`, `handlers`, `params` and `scope` are the HTTP side (sessions, commits that bump and
announce the config generation, ETag / If-Match, the audited change flow of a handler, shared
query parameters, tenant scoping). May import store, config (validation only), admin.access,
admin.audit and admin.errors (HTTP side only)."""
