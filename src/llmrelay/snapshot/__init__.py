"""The config snapshot: immutable data the request path reads instead of the database, and
its live reload (building, validating, swapping, and the change signals between replicas).

May import: store (to build), config (schema enums, credentials), guardrails (compiled
policies), observability.metrics, redis and asyncpg (signals). The gateway imports this
package; it imports no gateway code.
"""
