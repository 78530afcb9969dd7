# The two commands: `make run` and `make test`. Both install what they need first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup run test test-tls soak bench lint clean

setup:
	@bash scripts/setup.sh

run: setup
	$(VENV)/bin/blobstore standalone --data-dir ./data

test: setup
	$(PY) -m pytest -m "not soak" --durations=40 $(PYTEST_ARGS)

# The same suite with every test cluster over mutual TLS (tests/cluster/tls.py).
test-tls: setup
	BLOBSTORE_TEST_TLS=1 $(PY) -m pytest -m "not soak" --durations=40 $(PYTEST_ARGS)

soak: setup
	$(PY) -m pytest -m soak $(PYTEST_ARGS)

bench: setup
	@for b in bookie_bench ledger_bench catalog_bench recovery_bench maintenance_bench; do \
	    $(PY) -m bench.$$b || exit 1; done

lint: setup
	$(VENV)/bin/ruff check bookie blobstore s3api tests bench
	$(VENV)/bin/ruff format --check bookie blobstore s3api tests bench
	$(VENV)/bin/mypy bookie blobstore s3api tests bench

clean:
	rm -rf $(VENV) .deps build *.egg-info
