"""The web console (`/`): server-rendered pages (Jinja2) and its own static files, for the
operators and developers of a gateway. It is a client of the admin API, called in process
over ASGI with the user's session cookie and CSRF token: every permission, validation, audit
entry and ETag rule is the admin API's; the console never reads the database itself.

May import: settings, store.crypto (sealing its sign-in step), admin.access (the role table,
to show only what a role may use); nothing else of ours. Never imported by the data plane,
and never imports it (gateway/, limits/, providers/, protocols/): the Playground calls the data
plane from the browser, over HTTP.
"""
