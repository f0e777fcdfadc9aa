"""Checks, for `netcomp doctor`, whether this node can serve its networks, one check at a time."""
