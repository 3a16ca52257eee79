# warmpath — top-level commands. `make demo` and `make test` are the two that matter.
SHELL := /bin/bash
CARGO ?= cargo
JOBS ?= 2

.PHONY: demo test test-unit test-cluster cluster-up cluster-down lint fmt bench bench-datapath

## Run the router on 127.0.0.1:8080 (admin 127.0.0.1:9090) in front of 4 simulated replicas.
demo:
	bash examples/demo.sh

## Every test: unit, integration over loopback, and the cluster tests against a real
## kube-apiserver + etcd (built from Go modules on first use, then cached in e2e/.cache).
test: test-unit test-cluster

test-unit:
	$(CARGO) test -j $(JOBS) --workspace --exclude warmpath-e2e

test-cluster:
	@kubeconfig=$$(bash e2e/cluster/up.sh | tail -n 1) && \
	  WARMPATH_KUBECONFIG=$$kubeconfig $(CARGO) test -j $(JOBS) -p warmpath-e2e; \
	  status=$$?; bash e2e/cluster/down.sh >/dev/null 2>&1; exit $$status

cluster-up:
	bash e2e/cluster/up.sh

cluster-down:
	bash e2e/cluster/down.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy -j $(JOBS) --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## Data-path comparison against nginx and the SGLang gateway (needs nginx-light, wrk, sglang-router).
bench-datapath:
	bash bench/datapath.sh

bench: bench-datapath
	$(CARGO) bench -p warmpath-routing
