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

.PHONY: all setup host-packages venv plugin proto build test test-unit test-lab check-c check-san fuzz \
        demo bench \
        bench-failover bench-wrap bench-soak install lint clean distclean

all: build

$(STAMPS):
	mkdir -p $@

host-packages: $(STAMPS)/host-packages
$(STAMPS)/host-packages: scripts/host-packages.txt scripts/install-host-packages.sh | $(STAMPS)
	scripts/install-host-packages.sh
	touch $@

venv: $(STAMPS)/venv
# The editable install also compiles the shm library (setup.py) that the daemon loads.
$(STAMPS)/venv: pyproject.toml setup.py plugin/include/linkguard_shm.h $(wildcard plugin/src/shm_*.c) \
                $(STAMPS)/host-packages | $(STAMPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

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

# Every test: the C unit tests (plain, then sanitized), a short run of every fuzz harness, then
# pytest (unit, contract and lab tiers).
test: build
	$(MAKE) -C plugin check
	$(MAKE) check-san
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)
	$(PY) -m pytest

demo: build
	$(VENV)/bin/linkguard-lab demo

bench: build
	$(PY) -m bench.lab_iperf

# The long failover benchmarks (root; each builds and removes its own lab; not part of `test`).
# Method and results: BENCHMARKS.md, "Failover gap" (~20 min) and "Soak" (~8 min).
bench-failover: build
	$(PY) -m bench.failover_gap --trials 50

bench-soak: build
	$(PY) -m bench.soak --faults 200

# Wrap mode: bandwidth against the inner plugin alone, the failover gaps and the soak over it.
bench-wrap: build
	$(PY) -m bench.wrap_bw --trials 9 --gib 6
	$(PY) -m bench.failover_gap --trials 50 --wrap
	$(PY) -m bench.soak --faults 200 --wrap

# Installs daemon, CLI, unit, example config and the plugin (see docs/operators.md).
# NCCL_CONF=1 also adds NCCL_NET_PLUGIN=linkguard to $(DESTDIR)/etc/nccl.conf (opt-in).
install: build
	PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) scripts/install.sh $(if $(NCCL_CONF),--nccl-conf)

lint: build
	$(VENV)/bin/ruff check daemon cli lab tests bench

clean:
	$(MAKE) -C plugin clean
	rm -rf $(STAMPS) daemon/linkguardd/_lgshm*.so $(PROTO_OUT)

distclean: clean
	rm -rf $(VENV)
