"""Console identity: passwords, sign-in and sessions, two-factor (TOTP, passkeys) and
recovery codes, and the first platform-admin account. May import admin.access, admin.audit,
admin.errors, admin.state and store."""
