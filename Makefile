# The README's commands. `make test` is what CI runs.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: docs setup system-deps controlplane kueue trainer-chain demo up up-kueue test unit lint bench bench-peer bench-quick bench-peer-quick soak

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# Debian's prometheus (server and promtool) for the metrics end-to-end tests, and
# Debian's chromium for the status page's browser test.
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && \
	  command -v chromium >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    prometheus chromium)

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (about 10
# minutes the first time on 2 cores: 603 s measured on a fresh machine; instant after).
controlplane:
	bash controlplane/build.sh controlplane

# Kueue, for the tests and commands that run it (about 3.5 minutes the first time on 2
# cores: 208 s measured; a test that needs it builds it on first use too, and says so).
kueue:
	bash controlplane/build.sh kueue

# The real Kubeflow Trainer, JobSet and kwok, for the demo, `make up` and the tests
# (about 14 minutes the first time on 2 cores: 866 s measured on a fresh machine;
# instant after).
trainer-chain:
	bash controlplane/build.sh trainer

demo: setup controlplane trainer-chain
	$(VENV)/bin/dispatcher demo

# A local manager and two workers that stay up until Ctrl-C (kubectl, the SDK, the page).
up: setup controlplane trainer-chain
	$(VENV)/bin/dispatcher up

up-kueue: setup controlplane trainer-chain kueue
	$(VENV)/bin/dispatcher up --kueue

test: setup system-deps controlplane kueue trainer-chain
	$(PY) -m ruff check dispatcher devkit tests bench
	$(PY) -m mypy
	$(PY) -m pytest -q -p no:cacheprovider

unit: setup
	$(PY) -m pytest -q tests/unit

# The generated pages of docs/reference/ (a unit test fails when one is stale).
docs: setup
	$(PY) -m devkit.reference_docs docs/reference

lint: setup
	$(PY) -m ruff check dispatcher devkit tests bench
	$(PY) -m mypy

bench: setup controlplane kueue
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench dispatch --jobs 2000 --workers 3
	$(PY) -m bench peer --jobs 1000 --workers 3 --peer-minutes 6 \
	  --systems dispatcher-fair,dispatcher-check,multikueue-shipped,multikueue-tuned-remote-qps

# Every system and scenario at 3 and 10 workers, 1,000 jobs: several hours.
bench-peer: setup controlplane kueue
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench peer --workers 3,10 --jobs 1000 --peer-minutes 10

# The dispatcher beside MultiKueue: 200 jobs, 2 workers, the peer capped at 2 minutes.
bench-peer-quick: setup controlplane kueue
	$(PY) -m bench peer --quick

bench-quick: setup controlplane
	$(PY) -m bench dispatch --quick

soak: setup controlplane
	$(PY) -m bench soak --minutes 20 --rate 1

.PHONY: bench-chain-cost bench-peer-real-chain bench-fleet

# One dispatcher, a manager and 10, 25 then 50 lean workers (no Trainer chain): idle
# cost, a 5,000-job burst, 20,000 queued jobs, a lost worker; bench/results/fleet.*.
bench-fleet: setup controlplane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench fleet --workers 10,25,50

# What the real Trainer chain costs a cluster (RSS, CPU at idle and per job): a manager
# and one worker, 50 jobs; bench/results/chain-cost.{json,md}. About two minutes.
bench-chain-cost: setup controlplane trainer-chain
	$(PY) -m bench chain-cost

# The peer benchmark's `complete` scenario with both systems on the real chain: 2
# workers, 16 CPU each (96 one-CPU jobs, three times what they hold at once).
bench-peer-real-chain: setup controlplane kueue trainer-chain
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench peer --workers 2 --scenarios complete --real-chain \
	  --quota-cpu-per-worker 16 \
	  --scenario-systems dispatcher-fair,multikueue-default,multikueue-tuned-remote-qps
