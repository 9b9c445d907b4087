"""The admin API's webhooks: a project's signing secret (shown, rotated) and the deliveries of
its webhook events."""
