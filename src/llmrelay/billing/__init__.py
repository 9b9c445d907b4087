"""Prepaid billing: wallets and their append-only ledger (reserve before a provider call,
settle by the real cost), top-ups through Stripe, refunds and adjustments, and the mail the
billing and account life cycle sends (the outbox).

May import: store, settings, metering, jobs, snapshot. The data plane imports only its
reserve/settle entry points; never imports admin or console.
"""
