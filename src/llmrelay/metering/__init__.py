"""Metering: what a request used (token buckets), what it cost, and the bundled prices."""
