"""Guardrails: content policies over the text of model calls. Detectors (pure functions from
text to spans: PII, secrets, custom patterns and word lists), policies compiled from stored
rules with their actions (audit, mask, block) and the precedence of their bindings, and the
screening of a request's or an answer's text fields per client protocol.

May import nothing of ours: the snapshot builds guards from it and the gateway runs them; the
admin API validates rules with it.
"""
