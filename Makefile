# kmirror — developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kmirror/target

.PHONY: test demo lint build testbed-up testbed-down crds bench bench-fetcher

## test: lint, start the test bed if needed, run every test, stop what was started.
test:
	e2e/run-tests.sh

## demo: bring up the test bed, install kmirror with Helm, mirror a topic under traffic, fail over.
demo:
	e2e/demo.sh

## crds: regenerate the CRD YAML of the chart from the API types.
crds:
	cargo run -q -p kmirror-crds --bin crdgen

## lint: formatting and clippy, warnings are errors.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

build:
	cargo build --workspace --bins

testbed-up:
	e2e/testbed.sh up

testbed-down:
	e2e/testbed.sh down

## bench: kmirror vs MirrorMaker 2 vs the bed's limit (~25 min; BENCH_BYTES=200MB BENCH_RUNS=1 to try). Not part of test.
bench:
	bench/run.sh full

## bench-fetcher: the kmirror fetcher alone on ~1 GB of lz4 records.
bench-fetcher:
	bench/run.sh fetcher
