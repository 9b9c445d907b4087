"""The `openai_codex` provider type: a ChatGPT account (an OpenAI Codex subscription) signed
in by OAuth, as an upstream for the Responses API (docs/codex.md).

oauth.py speaks to the OAuth issuer (sign-in and refresh), accounts.py keeps each provider's
tokens fresh and its usage limits, limits.py reads those limits, adapter.py builds requests
to the Codex backend and transport.py signs and sends them. Same imports as providers/.
"""
