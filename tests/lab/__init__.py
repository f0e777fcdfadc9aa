"""What the tests build their labs from (network namespaces, the daemon in process and as a process, the shims,
a kube-apiserver, a kubelet node, systemd in nspawn, the chaos storm) and every helper more than one test module
uses, each module named for what it holds: helpers, no tests and no fixtures (those are in the conftest.py files;
tests/unit/test_test_layout.py keeps the rule)."""
