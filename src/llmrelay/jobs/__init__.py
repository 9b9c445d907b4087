"""Durable background jobs: the queue (claims under a lease with epoch fencing), the runner
that `serve` starts in process and `llmrelay worker` runs alone, periodic schedules, and the
jobs themselves (probes, discovery, price sync, retention, background responses, generations,
webhook deliveries).

May import: store, settings, snapshot, providers, protocols, metering, outbound, gateway (a job that
calls a model goes through the data plane's dispatcher). Never imports admin or console.
"""
