"""What the tests build their labs from (network namespaces, the daemon in process and as a process, the shims,
a kube-apiserver, a kubelet node, systemd in nspawn, the chaos storm): helpers, no tests."""
