# kmirror — developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kmirror/target

.PHONY: advisory-db deny sbom test demo lint build testbed-up testbed-down crds bench bench-fetcher bench-groups image image-check deploy-manifests soak scale

## test: lint, start the test bed if needed, run every test, stop what was started.
test:
	e2e/run-tests.sh

## demo: bring up the test bed, install kmirror with Helm, mirror a topic under traffic, fail over.
demo:
	e2e/demo.sh

## crds: regenerate the CRD YAML of the chart from the API types, and deploy/ from the chart.
crds:
	cargo run -q -p kmirror-crds --bin crdgen
	deploy/render.sh

## lint: formatting and clippy, warnings are errors.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## sbom: a CycloneDX SBOM of the shipped binaries' crates in $(CARGO_TARGET_DIR)/sbom.cdx.json
## (also written by image; checked by test).
sbom:
	deploy/sbom.py $(CARGO_TARGET_DIR)/sbom.cdx.json --check

## deny: cargo-deny licences, bans (duplicate versions listed), sources and RustSec advisories
## (live database, or the committed snapshot deny/advisory-db.tar.xz offline). Part of test.
deny:
	e2e/deny.sh

## advisory-db: refresh the committed RustSec snapshot from GitHub (ADVISORY_DB=URL-or-path).
advisory-db:
	deny/update-advisory-db.sh $(ADVISORY_DB)

build:
	cargo build --workspace --bins

testbed-up:
	e2e/testbed.sh up

testbed-down:
	e2e/testbed.sh down

## soak: kmirror (Helm, 2 operator replicas) mirrors 9 topics on the bed's replicated pair under
## traffic and a seeded schedule of faults, then verifies every partition and prints a verdict.
## SOAK_MINUTES (default 20) of faults; SOAK_SEED (default: drawn, printed) repeats a run. Not
## part of test. E.g. make soak SOAK_MINUTES=3 SOAK_SEED=1
SOAK_MINUTES ?= 20
SOAK_SEED ?=
soak:
	cargo build -q --workspace --bins --tests
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_SEED=$(SOAK_SEED) $(CARGO_TARGET_DIR)/debug/kmirror-soak

## scale: what a large mirror costs (a benchmark, not a test): on the bed, SCALE_TOPICS (50) x
## SCALE_PARTITIONS (10) partitions, SCALE_GROUPS (100) groups, a local release-build operator;
## prints time to MIRRORING, API requests/s, status writes/s, operator CPU/RSS, fetcher RSS,
## state-topic records/s, group-sync round time. See bench/README.md, "Scale".
scale:
	cargo build -q --release -p kmirror-operator -p kmirror-fetcher
	cargo build -q --workspace --bins --tests
	KMIRROR_E2E_BIN_DIR=$(CARGO_TARGET_DIR)/release $(CARGO_TARGET_DIR)/debug/kmirror-scale

## bench: kmirror (a process per partition, one pooled process) vs MirrorMaker 2 vs the bed's limit (~20 min; BENCH_BYTES=200MB BENCH_RUNS=1 to try). Not part of test.
bench:
	bench/run.sh full

## bench-fetcher: the kmirror fetcher alone on ~1 GB of lz4 records.
bench-fetcher:
	bench/run.sh fetcher

## bench-groups: one consumer-group offset sync of 200 groups, kmirror-sync-groups of BASE (a
## binary, e.g. an older build) against this build, interleaved (GROUPS=, ROUNDS=). Needs the bed.
bench-groups:
	@[ -n "$(BASE)" ] || { echo "make bench-groups BASE=path/to/kmirror-sync-groups" >&2; exit 2; }
	cargo build --bin kmirror-sync-groups --bin kmirror-fetcher -p kmirror-operator -p kmirror-fetcher
	cargo build -p kmirror-e2e --bin kmirror-bench-groups
	eval "$$(e2e/testbed.sh env)" && $(CARGO_TARGET_DIR)/debug/kmirror-bench-groups "$(BASE)" \
		$(CARGO_TARGET_DIR)/debug/kmirror-sync-groups --groups $(or $(GROUPS),200) --rounds $(or $(ROUNDS),3)

## image: build the container image (Docker >= 23 with BuildKit, podman or buildah; pulls the
## Rust and distroless bases). IMAGE=ghcr.io/kmirror/kmirror:0.1.0 by default. See docs/image.md.
IMAGE ?= ghcr.io/kmirror/kmirror:0.1.0
## The commit the binaries report in kmirror_build_info (unknown outside a Git checkout).
GIT_SHA ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
image: sbom
	@if docker info >/dev/null 2>&1; then docker build --build-arg GIT_SHA=$(GIT_SHA) -t $(IMAGE) .; \
	elif command -v podman >/dev/null; then podman build --layers --build-arg GIT_SHA=$(GIT_SHA) -t $(IMAGE) .; \
	elif command -v buildah >/dev/null; then buildah bud --layers --build-arg GIT_SHA=$(GIT_SHA) -t $(IMAGE) .; \
	else echo "make image: needs Docker (BuildKit), podman or buildah" >&2; exit 1; fi

## image-check: build the Dockerfile here, without a registry, on stand-in bases, and check the
## image (root, buildah, debootstrap; ~15 min cold, ~1 min warm). Not part of test.
image-check:
	e2e/image-check.sh

## deploy-manifests: regenerate deploy/ from the Helm chart (a test fails when they differ).
deploy-manifests:
	deploy/render.sh
