"""Backends: pure functions from an Intent to the context of its template (backend.py), one module per backend
type (macvlan.py holds macvlan and ipvlan, sriov.py, static.py), what they share (ipamconf.py; the `netcomp` block is
compiler/marker.py's), and the table that picks one by `spec.type` (registry.py)."""
