"""Single sign-on with OpenID Connect: discovery, the authorization code flow with PKCE, ID
tokens checked against the provider's published keys (RS256), the provider's groups mapped to
roles, and accounts made on first sign-in. May import admin.identity (sessions), admin.users,
store, settings; calls only the configured identity provider, over HTTP."""
