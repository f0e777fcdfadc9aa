# Two commands for a newcomer on a fresh Debian machine:
#   make demo   set everything up and compile the bundled examples
#   make test   set everything up and run lint, types and all tests
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# What the tests run for real: the CNI plugins, iproute2, nftables (pods' policy tables), systemd's tools, and
# Debian's packaging tools.
DEBS := containernetworking-plugins iproute2 nftables systemd systemd-container debhelper lintian python3-venv \
	python3-pip git openssl podman runc busybox-static debootstrap containerd $(SHIM_DEBS)
# The compiled shim: a C compiler and libc's headers (gcc brings the ASan and UBSan runtimes the tests use).
SHIM_DEBS := gcc libc6-dev

# The real Kubernetes API server and kubelet the Kubernetes tests run against (and the static pause of a pod's
# sandbox), built from Debian's source package (about 6 minutes the first time, then cached outside the checkout).
# The node tests (tests/integration/test_kubelet_node.py) run that kubelet with Debian's containerd: 40 s to 1.5
# minutes of `make test` (the kubelet's container GC, once a minute, decides).
KUBE_BINS ?= /var/cache/netcomp-test/kube
# The Debian 13 root the system tests build, lint, install and boot the package in (debootstrap, about 1-5 minutes
# and 850 MB the first time, then cached outside the checkout).
TRIXIE_ROOT ?= /var/cache/netcomp-test/trixie
export NETCOMP_TRIXIE_ROOT := $(TRIXIE_ROOT)/root

.PHONY: all setup system-deps kube-bins trixie-root demo test lint typecheck unit integration golden schema completion \
	bench chaos clean shim

all: test

# Debian packages the tests and the demo run for real (CNI plugins, iproute2).
system-deps:
	@if ! [ -x /usr/lib/cni/macvlan ] || ! command -v ip >/dev/null || ! command -v dh >/dev/null \
	    || ! command -v lintian >/dev/null || ! command -v systemd-analyze >/dev/null \
	    || ! command -v systemd-nspawn >/dev/null || ! command -v openssl >/dev/null \
	    || ! command -v cc >/dev/null || ! [ -e /usr/include/stdio.h ] \
	    || ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null \
	    || ! command -v containerd >/dev/null || ! [ -x /usr/sbin/nft ] \
	    || ! dpkg -s busybox-static >/dev/null 2>&1; then \
	  echo "installing Debian packages: $(DEBS)"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $(DEBS) >/dev/null; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: system-deps $(STAMP)

kube-bins: system-deps
	@if [ "$$(id -u)" = 0 ]; then scripts/kube-test-bins.sh $(KUBE_BINS); \
	else echo "kube-bins: not root; the Kubernetes tests will be skipped"; fi

trixie-root: system-deps
	@if [ "$$(id -u)" = 0 ]; then scripts/trixie-root.sh $(TRIXIE_ROOT); \
	else echo "trixie-root: not root; the Debian 13 tests will be skipped"; fi

demo: setup
	@bash scripts/demo.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check netcomp tests bench
	$(VENV)/bin/ruff format --check netcomp tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: setup kube-bins
	$(PY) -m pytest -q tests/integration

test: setup kube-bins trixie-root lint typecheck
	$(PY) -m pytest -q tests

# Regenerate golden files after an intended output change; review the diff like code.
golden: $(STAMP)
	NETCOMP_UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/unit/test_golden.py tests/unit/test_malformed.py
	git status --short tests/golden tests/unit/malformed

schema: $(STAMP)
	$(VENV)/bin/netcomp schema network > schemas/network.schema.json
	$(VENV)/bin/netcomp schema config > schemas/config.schema.json

# The bash completion the package installs, generated from the argument parser (a test fails when it is stale).
completion: $(STAMP)
	$(PY) -m netcomp.cli.completion > packaging/netcomp.bash-completion

bench: setup
	$(PY) bench/compile.py

# The long chaos run (docs/reliability.md): 100 containers, 200 kills of the daemon, then zero leftovers. Root.
CHAOS_ARGS ?= --containers 100 --kills 200 --seed 1
chaos: setup
	$(PY) -m tests.lab.chaos $(CHAOS_ARGS)

# The compiled shim, built as `netcomp install-shim` builds it (warnings are errors): build/netcomp-shim.
# The tests build it themselves, with and without the sanitizers; debian/rules with dpkg-buildflags.
shim: $(STAMP)
	mkdir -p build
	$(PY) -c 'from pathlib import Path; from netcomp.shim import install; install.build(Path("build/netcomp-shim"))'

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build *.egg-info
