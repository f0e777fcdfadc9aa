"""The runtime side of CNI in Python: configs, results, versions and plugin execution (libcni's job)."""
