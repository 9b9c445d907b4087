"""Metering: what a request used (token buckets), what it cost, and the bundled prices.

May import: nothing of ours outside this package (the gateway and admin import it).
"""
