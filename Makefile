# linkguard — top-level build. `make demo` and `make test` do every set-up step themselves.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
PREFIX  ?= /usr/local
DESTDIR ?=
STAMPS  := .build
# Seconds per fuzz harness: `make fuzz`, and in `make test` (enough to keep them from rotting).
FUZZ_SECONDS       ?= 120
FUZZ_SMOKE_SECONDS ?= 5

.PHONY: all setup host-packages venv plugin proto build test test-unit test-lab test-systemd \
        check-c check-san fuzz demo bench bench-failover bench-wrap bench-soak bench-gray bench-census \
        bench-latency bench-scale bench-spread test-repeat \
        gpu-prep gpu-check gpu-dry-run install wheelhouse constraints lint clean distclean

all: build

$(STAMPS):
	mkdir -p $@

host-packages: $(STAMPS)/host-packages
$(STAMPS)/host-packages: scripts/host-packages.txt scripts/install-host-packages.sh | $(STAMPS)
	scripts/install-host-packages.sh
	touch $@

venv: $(STAMPS)/venv
# The editable install also compiles the shm library (setup.py) that the daemon loads.
# Every version is pinned by constraints.txt; pyverbs comes from Debian (scripts/link-pyverbs.sh).
$(STAMPS)/venv: pyproject.toml constraints.txt setup.py plugin/include/linkguard_shm.h \
                $(wildcard plugin/src/daemon/shm_*.c) $(STAMPS)/host-packages | $(STAMPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	scripts/link-pyverbs.sh $(PY)
	touch $@

# Re-pins constraints.txt to the newest versions pyproject.toml allows (then `make test`).
constraints:
	rm -rf $(STAMPS)/lock-venv
	$(PYTHON) -m venv $(STAMPS)/lock-venv
	$(STAMPS)/lock-venv/bin/pip install -q '.[dev]'
	{ sed -n '/^#/p' constraints.txt; $(STAMPS)/lock-venv/bin/pip freeze --exclude-editable \
	    | grep -v '^linkguard'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(STAMPS)/lock-venv

setup: host-packages venv proto

# gRPC stubs are generated from the .proto at build time and never edited by hand.
PROTO_OUT := daemon/linkguard/v1/linkguard_pb2.py daemon/linkguard/v1/linkguard_pb2_grpc.py
proto: $(PROTO_OUT)
$(PROTO_OUT): proto/linkguard/v1/linkguard.proto $(STAMPS)/venv
	$(PY) -m grpc_tools.protoc -I proto --python_out=daemon --pyi_out=daemon \
	    --grpc_python_out=daemon proto/linkguard/v1/linkguard.proto

plugin: $(STAMPS)/host-packages
	$(MAKE) -C plugin

build: setup plugin

check-c: build
	$(MAKE) -C plugin check

# The C unit tests again under ASan+UBSan+LSan, then under TSan (plugin/san.mk).
check-san: $(STAMPS)/host-packages
	$(MAKE) -C plugin -j2 SAN=asan check
	$(MAKE) -C plugin -j2 SAN=tsan check

# Each libFuzzer harness (plugin/fuzz) for FUZZ_SECONDS; any crash, leak, UB or hang fails.
fuzz: $(STAMPS)/host-packages
	$(MAKE) -C plugin -j2 fuzz FUZZ_SECONDS=$(FUZZ_SECONDS)

test-unit: build
	$(PY) -m pytest tests/unit

test-lab: build
	$(PY) -m pytest tests/lab

# Every test: the C unit tests (plain, then sanitized), a short run of every fuzz harness,
# pytest (unit, contract and lab tiers), then the systemd tier.
test: build
	$(MAKE) -C plugin check
	$(MAKE) check-san
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)
	$(PY) -m pytest --ignore=tests/systemd
	$(MAKE) test-systemd

# `make test` N times on a fresh clone of HEAD with LOAD busy loops beside it: a table of run,
# result, time and first failing test (scripts/test_repeat.py). Green means N of N.
N    ?= 10
LOAD ?= 2
test-repeat:
	$(PYTHON) scripts/test_repeat.py --runs $(N) --load $(LOAD)

# The systemd tier (root): the wheelhouse installed into a booted Debian 12 (systemd-nspawn) and
# driven with systemctl. Its root file system is built once into /var/cache/linkguard-test/.
test-systemd: wheelhouse
	LG_WHEELHOUSE=$(CURDIR)/$(WHEELHOUSE).tar.gz $(PY) -m pytest tests/systemd

demo: build
	$(VENV)/bin/linkguard-lab demo

bench: build
	$(PY) -m bench.lab_iperf

# The long failover benchmarks (root; each builds and removes its own lab; not part of `test`).
# Method and results: BENCHMARKS.md, "Failover gap" (~20 min) and "Soak" (~8 min).
bench-failover: build
	$(PY) -m bench.failover_gap --trials 50

# Gray failures on the primary (lossy, policed, one stalled flow): throughput and failovers,
# on the TCP transport and in wrap mode (lgtcp inside).
bench-gray: build
	$(PY) -m bench.gray --trials 5
	$(PY) -m bench.gray --trials 5 --wrap --faults lossy,slow
	$(PY) -m bench.gray_soak --minutes 30 --burners 2

bench-soak: build
	$(PY) -m bench.soak --faults 200

# Many connections in many processes per host under one cut: gaps, standby time, descriptors,
# memory and the plugin threads' CPU (BENCHMARKS.md "Scale"; `--quick` for a subset).
bench-scale: build
	$(PY) -m bench.scale --trials 2

# Spread failover (issue 28): 2 hosts x 4 policed rails, 4 devices x 8 connections, spread
# backup sets against a ring of pairs, cut rail0 then rail1 (BENCHMARKS.md "Spread failover
# (issue 28)"; root, ~3.5 min).
bench-spread: build
	$(PY) -m bench.spread

# How soon `linkguard-cli status` shows 2 x 64 connections moved by a cut and back after the
# restore, from the plugins' census (BENCHMARKS.md "Census"; root, ~1 min).
bench-census: build
	$(PY) -m bench.census_delay --trials 5

# Wrap mode: bandwidth and round trips against the inner plugin alone, the failover gaps and
# the soak over it.
bench-wrap: build
	$(PY) -m bench.wrap_bw --trials 9 --gib 6
	$(PY) -m bench.failover_gap --trials 50 --wrap
	$(PY) -m bench.soak --faults 200 --wrap

# The issue-13 overhead goals alone (~6 min, root): wrap mode against lgtcp alone (bandwidth
# and round trips at 8 B, 64 KiB, 1 MiB), then linkguard native's round trips against a plain
# TCP ping-pong on the same rail. Method and results: BENCHMARKS.md, "Round trips".
bench-latency: build
	$(PY) -m bench.wrap_bw --trials 9 --gib 1
	$(PY) -m bench.plugin_bw --trials 9 --sizes '' --baseline bench/latency_baseline.json

# The real-NCCL check (tests/gpu/, CONTRIBUTING.md "GPU check"; root). gpu-prep here, before
# a GPU-machine run: .gpu/ (wheels, stubs, prebuilt plugin, ip) for the run to carry.
# gpu-check on a machine with a GPU and torch; gpu-dry-run anywhere (lg_nccl_driver stands in
# for the ranks; `make test` runs it too, tests/lab/test_gpu_check_flow.py).
gpu-prep: build
	tests/gpu/prepare.sh

# The harness and daemons run under the venv; the ranks under RANK_PYTHON (one with torch).
RANK_PYTHON ?= python3
gpu-check: build
	PYTHON=$(PY) LG_GPU_RANK_PYTHON=$(RANK_PYTHON) tests/gpu/run_nccl_check.sh

gpu-dry-run: build
	PYTHON=$(PY) tests/gpu/run_nccl_check.sh --dry-run

# Installs daemon, CLI, unit, example config and the plugin (see docs/operators.md).
# NCCL_CONF=1 also adds NCCL_NET_PLUGIN=linkguard to $(DESTDIR)/etc/nccl.conf (opt-in).
install: build
	PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) scripts/install.sh $(if $(NCCL_CONF),--nccl-conf)

# One artefact to copy to every host (offline install, the same bytes everywhere): wheels of
# linkguard and its pinned dependencies, the plugin, unit, config and docs. On a host, as root:
#   tar xzf linkguard-VERSION-wheelhouse.tar.gz && linkguard-VERSION-wheelhouse/scripts/install.sh
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
WHEELHOUSE := dist/linkguard-$(VERSION)-wheelhouse
wheelhouse: build
	rm -rf $(WHEELHOUSE) $(WHEELHOUSE).tar.gz
	mkdir -p $(WHEELHOUSE)/wheels
	$(PY) -m pip wheel -q --no-cache-dir -c constraints.txt -w $(WHEELHOUSE)/wheels .
	cp -r --parents README.md constraints.txt docs systemd slurm/linkguard-slurm.toml slurm/nhc \
	    fleet/prometheus/linkguard.rules.yml fleet/grafana/linkguard.json \
	    scripts/install.sh \
	    scripts/link-pyverbs.sh plugin/build/libnccl-net-linkguard.so $(WHEELHOUSE)/
	tar -C dist -czf $(WHEELHOUSE).tar.gz $(notdir $(WHEELHOUSE))
	@echo "$(WHEELHOUSE).tar.gz"

lint: build
	$(VENV)/bin/ruff check daemon cli lab tests bench

clean:
	$(MAKE) -C plugin clean
	rm -rf $(STAMPS) daemon/linkguardd/_lgshm*.so $(PROTO_OUT) dist

distclean: clean
	rm -rf $(VENV)
