"""Addresses unique across every node that serves a network (`ipam: {type: cluster}`): the pool a compiled network
names (pool.py), the claim of one address and the store that keeps claims (store.py: one record per address,
whose name is derived from network and address, so that the store's own uniqueness is the lock; a node-local
store in localstore.py, the Kubernetes API's in ipam/claimobjects.py), and the allocator that picks free
addresses from a view the store keeps current, claims them, and gives back what nobody holds (allocator.py)."""
