"""Host work: interfaces in network namespaces, host VLAN/VXLAN masters, SR-IOV discovery."""
