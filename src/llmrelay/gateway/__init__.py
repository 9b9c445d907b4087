"""The data plane (`/v1/*`): ingress, authentication, resolution, execution, recording.

May import: snapshot, providers, protocols, routing, limits, metering, observability, settings,
apikeys, deadlines, store (recorder and spool only), billing (a prepaid tenant's reserve and
settle only: gateway/prepaid.py, ending.py). Never imports admin or console.
"""
