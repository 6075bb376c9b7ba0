# One entry for every chore. `make help` lists them.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STACK := $(BIN)/python scripts/stack.py
SPARK ?= 0
WIPE ?= 0
MINUTES ?= 30
ROUNDS ?= 3
ARGS ?=
# faketime: the clock-skew test runs a client whose clock is ahead of the KDC's
SYSTEM_PACKAGES := libkrb5-dev krb5-user faketime

.DEFAULT_GOAL := help
.PHONY: help native bench-native trip promtool check-alerts bench-ui bench-wide bench-cluster bench-cells venv-spark35 test-kafka3 system-deps run-kerberos stack-up-secure venv lock jars stack-up stack-down stack-status shell run test test-fast test-slowed test-unit lint fmt bench bench-latency bench-recovery soak chaos yarn-up yarn-down yarn-pack clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml constraints.txt
	@command -v $(PY) >/dev/null || { echo "need $(PY) on PATH"; exit 1; }
	@command -v krb5-config >/dev/null && command -v faketime >/dev/null || $(MAKE) system-deps
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

# the native read path (src/native), built into the venv where cargo is (scripts/native.sh)
NATIVE_SRC := src/native/Cargo.toml src/native/Cargo.lock src/native/pyproject.toml src/native/src/lib.rs
$(BIN)/.native: $(NATIVE_SRC) $(BIN)/.installed
	scripts/native.sh $(VENV)
	touch $@

native: $(BIN)/.native ## build leakproof_native (Rust, pyo3) into .venv; without cargo the pure path stays

# the pyspark 3.5 line (Scala 2.12): the same project and tools at constraints-spark35.txt
.venv-spark35/bin/.installed: pyproject.toml constraints-spark35.txt $(BIN)/.installed
	test -x .venv-spark35/bin/python || $(PY) -m venv .venv-spark35
	.venv-spark35/bin/pip install -q --upgrade pip
	.venv-spark35/bin/pip install -q -c constraints-spark35.txt -e '.[dev]'
	scripts/native.sh .venv-spark35
	touch $@

venv-spark35: .venv-spark35/bin/.installed ## create .venv-spark35: leakproof on pyspark 3.5, at the versions in constraints-spark35.txt

system-deps: ## Debian packages: MIT Kerberos headers (to build gssapi), its client tools; faketime (tests)
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $(SYSTEM_PACKAGES) \
	  || { DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -q && \
	       DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $(SYSTEM_PACKAGES); }

venv: $(BIN)/.installed $(BIN)/.native ## create .venv with leakproof and its tools, at the versions in constraints.txt

# promtool, Prometheus's rule checker, taken from Debian's `prometheus` package: an installed
# one (apt-get install prometheus) if on PATH, else the package fetched with apt-get download
# and unpacked, never installed, so no Prometheus server starts (Debian's would take 9090,
# the HBase Thrift port).
$(BIN)/promtool: | $(BIN)/.installed
	@if command -v promtool >/dev/null; then ln -sf "$$(command -v promtool)" $@; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd "$$tmp" && chmod 755 . && \
	{ apt-get download -q prometheus 2>/dev/null || \
	  { DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -q >/dev/null && \
	    apt-get download -q prometheus; }; } && \
	dpkg-deb -x prometheus_*.deb unpacked && \
	cp unpacked/usr/bin/promtool "$(CURDIR)/$@" && "$(CURDIR)/$@" --version | head -1

promtool: $(BIN)/promtool ## promtool (Prometheus's rule checker) from Debian's prometheus package, into .venv/bin

check-alerts: $(BIN)/promtool ## promtool over deploy/prometheus: check rules, check config, test rules
	$(BIN)/promtool check rules deploy/prometheus/alerts.yml
	$(BIN)/promtool check config deploy/prometheus/prometheus.yml
	cd deploy/prometheus && "$(CURDIR)/$(BIN)/promtool" test rules alerts_test.yml

lock: ## re-resolve the newest versions pyproject.toml allows into constraints.txt (then make test)
	rm -rf .venv-lock && $(PY) -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade pip && .venv-lock/bin/pip install -q -e '.[dev,bench]'
	{ echo "# The versions make venv installs: the set CI last passed with. make lock renews it."; \
	  .venv-lock/bin/pip freeze --exclude-editable; } > constraints.txt
	rm -rf .venv-lock

jars: venv ## fetch the Kafka and HBase jars from Maven Central (cached)
	$(STACK) fetch

stack-up: venv ## start Kafka, HBase + Thrift (SPARK=1: also Spark standalone; WIPE=1: empty data; CLUSTER=1: 3 Kafka nodes, 2 HBase masters and 2 region servers)
	$(STACK) up $(if $(filter 1,$(SPARK)),--spark) $(if $(filter 1,$(WIPE)),--wipe) $(if $(filter 1,$(CLUSTER)),--cluster)

stack-down: venv ## stop everything the stack started (WIPE=1: SIGKILL it and delete its data)
	$(STACK) down $(if $(filter 1,$(WIPE)),--wipe)

stack-status: venv ## one line per service: pid, port, memory
	$(STACK) status

shell: ## the HBase shell on the local stack (reads commands from stdin)
	scripts/hbase-shell

run: venv ## README command 1: the job on the local stack, checked against the oracle
	scripts/demo.sh

run-kerberos: venv ## the job on the secured stack (KDC, Kafka GSSAPI, HBase Thrift SASL; MODE=https) + oracle
	scripts/demo_kerberos.sh

stack-up-secure: venv ## start the secured stack: KDC, Kerberized Kafka and HBase, Thrift SASL (9190) and HTTPS (9191)
	$(STACK) secure-up $(if $(filter 1,$(WIPE)),--wipe)

test: venv promtool ## README command 2: lint, start the stack, run every test tier, stop the stack
	scripts/test.sh $(ARGS)

test-all: venv promtool ## make test with the deep tests too: every variant and single fault, the whole core on pyspark 3.5 (about 55 min)
	scripts/test.sh all $(ARGS)

test-fast: venv promtool ## unit + the quiet integration tests (no faults, cluster, slow or serial), Kafka and HBase only
	scripts/test.sh fast $(ARGS)

test-kafka3: venv ## the Kafka-facing integration tests against a Kafka 3.9 broker in place of 4.x (stack up first)
	scripts/test_kafka3.sh $(ARGS)

SLOWER ?= 3
TESTS ?= tests/integration
test-slowed: venv ## integration tests (TESTS=...) on a machine SLOWER (3) times slower: a CPU cgroup over them and the running stack (root; SPARK=1 stack up first)
	scripts/slowed.sh $(SLOWER) $(BIN)/pytest -q -n 3 --dist loadgroup -rf -m "integration and not serial and not deep" $(ARGS) $(TESTS)

test-unit: venv ## the pure tests only (no network, no JVM)
	$(BIN)/pytest -q tests/unit

trip: venv ## one record's trip through a task, Kafka to its session row: the stops, and any call up a floor (on the code alone: pytest -s tests/unit/test_trip.py)
	$(STACK) up
	$(BIN)/python scripts/trip.py

lint: venv check-alerts ## ruff, mypy and promtool over the alert rules
	$(BIN)/ruff check src tests scripts
	$(BIN)/mypy

fmt: venv ## ruff's fixes and formatting of imports
	$(BIN)/ruff check --fix src tests scripts

bench: venv ## throughput: the raw read + decode ceiling, the job, its Structured Streaming peer
	$(BIN)/pip install -q -c constraints.txt -e '.[bench]'
	$(STACK) up
	$(BIN)/python scripts/bench.py

bench-wide: venv ## the same events in 4, 240 and 900 partitions: drain time and ratios; steady state on 240
	$(BIN)/pip install -q -c constraints.txt -e '.[bench]'
	$(STACK) up
	$(BIN)/python scripts/bench_wide.py

bench-cluster: venv ## make bench's job on the one-node stack and the cluster stack, in turn (ROUNDS, EVENTS): ev/s, CPU, ratio
	$(BIN)/pip install -q -c constraints.txt -e '.[bench]'
	$(BIN)/python scripts/bench_cluster.py

bench-native: venv ## the native read path beside the pure one, in-process: CPU us per record read, decoded, copied
	$(BIN)/python scripts/bench_native.py

bench-cells: venv ## what a cell written to HBase costs (rows of 2-32 cells), and a row read, present or absent
	$(STACK) up
	$(BIN)/python scripts/bench_cells.py

bench-latency: venv ## steady load at half make bench's rate: p50/p95/p99 Kafka timestamp -> commit, job and peer
	$(BIN)/pip install -q -c constraints.txt -e '.[bench]'
	$(STACK) up
	LATENCY=1 $(BIN)/python scripts/bench.py

bench-ui: venv ## the Spark UI's cost to the driver: off, on, on and watched, under steady load (ROUNDS, RATE, DURATION_S)
	$(STACK) up
	$(BIN)/python scripts/bench_ui.py

bench-recovery: venv ## ROUNDS driver SIGKILLs under spark-submit (standalone), restarted at once: seconds to the next commit
	$(STACK) up --spark
	$(BIN)/python scripts/bench_recovery.py

soak: venv ## MINUTES=N of steady load + a random fault every 1-3 min; oracle verdict + table
	$(STACK) up --spark
	$(BIN)/python scripts/soak.py --minutes $(MINUTES)

chaos: venv ## the whole fault matrix ROUNDS times over (CI runs each scenario once)
	$(STACK) up --spark
	for i in $$(seq $(ROUNDS)); do \
	  echo "== chaos round $$i of $(ROUNDS)"; \
	  $(BIN)/pytest -q -s tests/integration/test_faults.py \
	    tests/integration/test_cluster_faults.py tests/integration/test_outages.py \
	    tests/integration/test_topic_changes.py || exit 1; \
	done

yarn-up: venv ## Kafka, HBase and a MiniYARNCluster (RM 127.0.0.1:8032; conf in .services/yarn/conf)
	$(STACK) up --yarn

yarn-down: venv ## stop the MiniYARNCluster
	$(STACK) stop yarn

yarn-pack: venv ## .services/yarn/leakproof-env.tar.gz: the job's Python env for --archives
	$(BIN)/python scripts/yarn_pack.py

clean: ## remove the venvs, the stack's jars and data, caches
	-$(STACK) down 2>/dev/null
	rm -rf $(VENV) .venv-spark35 .services .pytest_cache .mypy_cache .ruff_cache .test-results src/*.egg-info src/native/target
