"""The CNI plugin container runtimes exec (the shim): `plugin.py`, self-contained and stdlib-only (it imports
nothing of netcomp, and nothing of netcomp imports it but tests), the launcher it is installed behind, and its
installer."""
