"""Prepaid billing: wallets and their append-only ledger (reserve before a provider call,
settle by the real cost), top-ups through Stripe, refunds and adjustments, the jobs that top
wallets up and reconcile what was left open, and the mail the billing and account life cycle
sends (the outbox). docs/billing.md.

May import: store, settings, metering, jobs, snapshot, observability.metrics, and from the
data plane only gateway.call (the record's columns) and gateway.row_queue. The data plane
imports only its reserve/settle entry points (gateway/prepaid.py, Runtime.prepaid); never
imports admin or console.
"""
