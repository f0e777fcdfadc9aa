"""Network policy on secondary networks: MultiNetworkPolicy read, the pods it selects resolved, and each pod's
rules written as an nftables table in its network namespace."""
