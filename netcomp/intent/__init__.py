"""Intents: YAML documents with source positions turned into validated Network models, whatever format (netcomp's,
DANM's, Multus's) they came in, and the rules across intents."""
