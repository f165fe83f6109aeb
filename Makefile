# kmirror — developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kmirror/target

.PHONY: test lint build testbed-up testbed-down crds

## test: lint, start the test bed if needed, run every test, stop what was started.
test:
	e2e/run-tests.sh

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
