"""The data plane (`/v1/*`): ingress, authentication, resolution, execution, recording.

May import: snapshot, providers, protocols, settings, apikeys, store (recorder only).
Never imports admin or console.
"""
