"""Wire formats: parsing and producing each client protocol's bodies, events and errors.

Pure functions over bytes and dicts. May import: gateway.errors (the error tree it renders).
"""
