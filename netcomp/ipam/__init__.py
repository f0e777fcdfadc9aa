"""Addresses unique across every node that serves a network (`ipam: {type: cluster}`), and the ids TenantConfigs
give: pools and names (pool.py, blocks.py), claims and the stores that keep them (store.py, localstore.py,
claimobjects.py, blockobjects.py), and the allocators that give from them (allocator.py, blockalloc.py)."""
