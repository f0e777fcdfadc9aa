"""Backends: pure functions from an Intent to the context of its template, one module per backend type, and the
table that picks one by `spec.type` (registry.py)."""
