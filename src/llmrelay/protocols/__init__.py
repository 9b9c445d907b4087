"""Wire formats: parsing and producing each client protocol's bodies, events and errors.

Pure functions over bytes and dicts. Stands on its own: the errors it raises and renders are
its own (protocols/errors.py); it never imports the gateway. May import: llmrelay.snapshot.model
(the model lists it writes).
"""
