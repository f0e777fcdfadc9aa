"""Delegation: which networks a container joins, what its interfaces are called, and running the delegates."""
