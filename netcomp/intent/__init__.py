"""Intents: documents with source positions (source.py) turned into validated Network models (model.py,
validation.py) whatever format they came in (parse.py; DANM's objects in danm.py, Multus's in nad.py, what the
two share in compat.py); the host links an intent implies (hostlink.py); rules across intents (rules.py)."""
