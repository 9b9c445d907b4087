"""Outgoing mail: the outbox (each mail's sealed body and its `send_mail` job written in the
caller's transaction, so a mail goes out exactly when the change that caused it commits), the
templates (plain text and HTML), and delivery over SMTP with retries.

May import: store, settings, jobs (the queue and job kinds). Never imports admin, console
or gateway: the admin API and the alerts call `queue_mail`; the jobs runner sends.
"""
