"""Pending invitations: the accounts invited and not yet active, with their link's expiry and
their mail's state; sending a new link; revoking one. May import admin.accounts (the
invitation rules), admin.users, store."""
