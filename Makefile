# disquette: the two commands a user needs are `make run` and `make test`.
# Both build their own virtual environment in .venv from pyproject.toml.

# Prefer the distribution's Python 3.11 (an optimised PGO/LTO build, 15-25 % faster
# than a plain source build), then whatever python3.11 or python3 is on the PATH.
PYTHONS := $(wildcard /usr/bin/python3.11) $(shell command -v python3.11) $(shell command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
BUILT  := $(VENV)/.compiled
PORT   ?= 7711
ARGS   ?=
# pip's own output goes here; it is shown only when an install fails.
PIP_LOG := $(VENV)/install.log
PIP    := $(PY) -m pip --disable-pip-version-check install >>$(PIP_LOG) 2>&1

.PHONY: run test test-deep lint bench example example-cluster tools clean

# The package and its dependencies: all a node needs (make run). The install itself
# builds nothing; the compiled hot path is built in place just below.
$(STAMP): pyproject.toml
	@echo "disquette: setting up $(VENV) with the package and its dependencies (first time only, about 30 s)"
	@rm -rf $(VENV); for py in $(PYTHONS); do \
	  $$py -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && \
	  $$py -m venv $(VENV) 2>/dev/null && echo "disquette: virtualenv from $$py" && break; \
	  rm -rf $(VENV); done; test -x $(PY) || { echo "need Python >= 3.11 with venv"; exit 1; }
	@$(PIP) --upgrade pip 'setuptools>=77' 'mypy>=1.15' && \
	  DISQUETTE_BUILD=pure $(PIP) --no-build-isolation -e . || { cat $(PIP_LOG); exit 1; }
	@$(EDITABLE_PTH)
	@touch $(STAMP)

# An editable install leaves out what a wheel puts beside the packages: the .pth
# that registers disque:// with Kombu (src/_disquette_kombu.py); copy it in.
EDITABLE_PTH = cp src/disquette-kombu.pth "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"

# The compiled hot path: mypyc compiles the modules src/disquette/build.py lists into
# extension modules beside their sources (setup.py), again whenever one of them
# changes (src/disquette/tools/compiled_build.py: a lock keeps two compiles apart, the
# log is .venv/compile.log). Without a C compiler the pure build stays, with a warning.
COMPILED_SOURCES := $(addprefix src/disquette/,$(addsuffix .py,$(shell \
  sed -n 's/^    "disquette\.\([a-z_.]*\)",$$/\1/p' src/disquette/build.py | tr . /)))
$(BUILT): $(STAMP) setup.py src/disquette/build.py $(COMPILED_SOURCES)
	@$(PY) -m disquette.tools.compiled_build

# What the tests, the linter, the benchmarks and the Spark example need beyond that,
# with the Celery and Dramatiq extras (tests/integrations runs their workers).
$(TEST_STAMP): $(STAMP)
	@echo "disquette: installing the test tools and the Spark, Celery and Dramatiq extras (pyspark and pyarrow, about 700 MB; first time only, a few minutes)"
	@DISQUETTE_BUILD=pure $(PIP) --no-build-isolation -e '.[dev,spark,celery,dramatiq]' || { cat $(PIP_LOG); exit 1; }
	@$(EDITABLE_PTH)
	@touch $(TEST_STAMP)

# Start a local three-node cluster on 7711-7713 (data and logs in .run/), joined and
# ready; Ctrl-C stops every node cleanly. `make run PORT=7720`, `make run ARGS=...` or
# `make run NODES=1` start one node in the foreground instead; NODES=5 starts five.
# It does not wait for the compiled build: when that is missing or stale, the nodes run
# the pure build and the compiled one is made in the background for the next start.
run: $(STAMP)
	@$(PY) -m disquette.tools.local_cluster --compile-in-background --port $(PORT) \
	  --nodes $(or $(NODES),$(if $(filter-out file,$(origin PORT) $(origin ARGS)),1,3)) \
	  -- $(ARGS)

# redis-cli and redis-benchmark (Debian's redis-tools) are used by the tests as
# real third-party clients, the dashboard's tests drive Debian's headless Chromium
# (chromium and chromium-driver), the alert rules are checked by promtool (Debian's
# prometheus), Spark (the spark extra) needs a Java runtime, and the compiled build a
# C compiler and Python's headers, deploy/'s tests systemd-analyze (Debian's systemd) and
# ip netns (iproute2); install them where missing (one apt-get update).
tools:
	@missing=; \
	command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null || missing="$$missing redis-tools"; \
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || missing="$$missing chromium chromium-driver"; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v gcc >/dev/null && test -f "$$($(firstword $(PYTHONS)) -c \
	  'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" || missing="$$missing gcc python3-dev"; \
	bare=; command -v promtool >/dev/null || bare=prometheus; \
	command -v systemd-analyze >/dev/null || bare="$$bare systemd"; \
	command -v ip >/dev/null || bare="$$bare iproute2"; \
	test -z "$$missing$$bare" || { \
	  echo "disquette: installing Debian's$$missing $$bare (the tests' real clients, browser, Spark's Java, promtool, systemd-analyze and ip netns for deploy/'s tests, and the compiled build's compiler)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  { test -z "$$missing" || DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; } && \
	  { test -z "$$bare" || DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$bare >/dev/null; }; }

# make test is CI's run: every test, on a budget (about 25 minutes from a fresh clone
# on two cores, setup included; the aim is 15); make test-deep runs the same tests at
# their full depth (about 35 minutes there: before a release, or to hunt). What the budget trims is how far the
# generated cases reach, never which tests run:
# - the simulator's seed ranges in the compiled run (MAIN_SIM_SEEDS), to about 30 s of
#   CPU each; the pinned regression seeds always run. `python -m pytest tests/sim`
#   alone runs the defaults (1,000 seeds for most ranges);
# - the Hypothesis examples of every property and fuzz test, to a quarter
#   (FUZZ_SCALE, tests/support/fuzz.py);
# - the simulator in the pure run (PURE_SIM_SEEDS) to 10 seeds a range (25 and 30 for
#   outcomes and coordination, whose checks need that many to see each case).
# The unit and simulator tests run on the pure sources too (DISQUETTE_PURE=1: the same
# modules, interpreted: what runs where no C compiler is): the compiled run covers the
# ranges, the pure one checks that the interpreted modules keep the properties too,
# and tests/sim/test_builds.py that both builds run seeds of each mode to the same
# history. The no-repair runs keep their 100 seeds in both (fewer lose no job, which
# that test must see). The fuzzers run once, on the compiled build: they try the same
# sources' parsers.
MAIN_SIM_SEEDS := DISQUETTE_SIM_SEEDS=500 DISQUETTE_SIM_ROLLING=200 \
  DISQUETTE_SIM_FEDERATION=250 DISQUETTE_SIM_FEATURES=250 DISQUETTE_SIM_COORDINATION=150 \
  DISQUETTE_SIM_SKEW=250 DISQUETTE_SIM_FLOW=200 DISQUETTE_SIM_RATE=300 \
  DISQUETTE_SIM_CRON=250 DISQUETTE_SIM_OUTCOMES=300 DISQUETTE_SIM_FAIR=100
PURE_SIM_SEEDS := DISQUETTE_SIM_SEEDS=10 DISQUETTE_SIM_ROLLING=10 \
  DISQUETTE_SIM_FEDERATION=10 DISQUETTE_SIM_FEATURES=10 DISQUETTE_SIM_COORDINATION=30 \
  DISQUETTE_SIM_SKEW=10 DISQUETTE_SIM_FLOW=10 DISQUETTE_SIM_RATE=10 \
  DISQUETTE_SIM_CRON=10 DISQUETTE_SIM_OUTCOMES=25 DISQUETTE_SIM_UPGRADE=2 \
  DISQUETTE_SIM_FAIR=10
FUZZ_SCALE := 0.25
# make test-deep: the compiled run at the defaults, every example, and the pure run
# at a twentieth of the seeds.
test-deep: MAIN_SIM_SEEDS :=
test-deep: FUZZ_SCALE := 1
test-deep: PURE_SIM_SEEDS := DISQUETTE_SIM_SEEDS=50 DISQUETTE_SIM_ROLLING=50 \
  DISQUETTE_SIM_FEDERATION=50 DISQUETTE_SIM_FEATURES=25 DISQUETTE_SIM_COORDINATION=30 \
  DISQUETTE_SIM_SKEW=50 DISQUETTE_SIM_FLOW=50 DISQUETTE_SIM_RATE=50 \
  DISQUETTE_SIM_CRON=50 DISQUETTE_SIM_OUTCOMES=50 DISQUETTE_SIM_UPGRADE=2 \
  DISQUETTE_SIM_FAIR=20
# Disque's compatibility tests once more with flow to disk at its most: every job past
# the first of its queue on disk (a level of 1 byte), under a 4 MB disk limit (so that
# the tests of a node running out of memory still see it refuse jobs).
FLOW_ARGS := --flow-to-disk yes --flow-to-disk-level 1 --flow-to-disk-readahead 1 \
  --flow-to-disk-max-size 4mb
FLOW_COMPAT := tests/integration/test_jobs.py tests/integration/test_queues.py \
  tests/integration/test_pipelined_addjob.py tests/integration/test_queue_extensions.py \
  tests/integration/test_aof.py tests/integration/test_introspection.py \
  tests/integration/test_coordination.py
# The tests run in three sessions side by side (tests/run.sh): every test on the
# compiled build on TEST_WORKERS pytest-xdist workers (most of a test's time is spent
# waiting on a node's timers, so more workers than cores), each module's tests on one
# worker (--dist loadscope: its module fixtures made once; tests/spark's modules all on
# one, for one Spark JVM; tests/conftest.py), the slowest 20 printed at the end; the
# flow-to-disk and pure runs beside it.
TEST_WORKERS ?= 5
test test-deep:
	@$(MAKE) --no-print-directory -j3 test-setup
	@env $(MAIN_SIM_SEEDS) DISQUETTE_FUZZ_SCALE=$(FUZZ_SCALE) bash tests/run.sh $(PY) $(TEST_WORKERS) "$(FLOW_ARGS)" "$(FLOW_COMPAT)" "$(PURE_SIM_SEEDS)" $(PYTEST_ARGS)

# make test's setup, side by side (make -j3): Debian's packages install while pip fills
# .venv; the linters run while the hot path compiles, which waits for both (its
# compiler comes from the first, and two pips never write .venv at once). The linters'
# mypy keeps its cache apart from mypyc's (.mypy_cache, written by the compile).
.PHONY: test-setup test-lint test-build
test-setup: tools test-lint test-build
test-lint: $(TEST_STAMP)
	@$(VENV)/bin/ruff check src tests bench examples
	@MYPY_CACHE_DIR=$(VENV)/mypy-cache $(VENV)/bin/mypy -p disquette
test-build: tools $(TEST_STAMP)
	@$(MAKE) --no-print-directory -s $(BUILT)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples
	$(VENV)/bin/mypy -p disquette

bench: $(TEST_STAMP) $(BUILT)
	$(PY) bench/run.py $(BENCH_ARGS)

# The Spark example pipeline (examples/pipeline.py) on a disquette node of its own:
# load orders into a queue, consume them with a streaming query, check nothing was lost.
example: $(TEST_STAMP) $(BUILT)
	$(PY) examples/pipeline.py $(EXAMPLE_ARGS)

# The same over three nodes of its own (examples/cluster_pipeline.py): orders from
# Parquet into the cluster, consumed by the executors into Parquet, and a report.
example-cluster: $(TEST_STAMP) $(BUILT)
	$(PY) examples/cluster_pipeline.py $(EXAMPLE_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .hypothesis .mypy_cache .test-logs
	find src -name '*.so' -delete
