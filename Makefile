# servelab: `make lab` opens the workbook, `make test` passes every test. Both set everything up first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(CURDIR)/$(BIN):$(PATH)
PORT ?= 8888
IP ?= 127.0.0.1
LAB_ARGS ?= --no-browser
SUBMISSIONS ?= autograder/submitted
GRADE_ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup lab lab-instructor check test release release-if-stale model solutions autograde lint bench browser-deps \
        sandbox-deps clean mutants similarity hub hub-deps hub-roster hub-release hub-collect hub-feedback hub-autograde \
        hub-similarity hub-backup hub-restore

# The environment: a venv with the package (editable), its pinned dependencies and the `servelab` kernel.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing servelab and its dependencies into $(VENV): a few minutes the first time (log: $(VENV)/pip.log)"
	@set -o pipefail; $(BIN)/python -m pip install -e '.[dev]' 2>&1 | tee $(VENV)/pip.log | \
	  { grep --line-buffered -E '^(Collecting|Installing collected|Successfully installed)' | cut -c1-110 || true; } \
	  || { tail -40 $(VENV)/pip.log; exit 1; }
	@$(BIN)/python -m ipykernel install --sys-prefix --name servelab --display-name "Python (servelab)" >/dev/null
	@$(BIN)/python scripts/kernelspec.py
	@touch $@

setup: $(STAMP)

# Headless Chromium for the browser test (Debian's package; Playwright never downloads a browser here).
browser-deps:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian's chromium for the browser test"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# The grading sandbox: Debian's bubblewrap and, as root, the unprivileged users sandboxes run as (one per
# submission graded at the same time on this machine). `python -m servelab_autograder.runner.sandbox` says whether
# this machine can grade safely.
SANDBOX_USERS ?= 8
sandbox-deps: setup
	@command -v bwrap >/dev/null || { \
	  echo "installing Debian's bubblewrap for the grading sandbox"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap >/dev/null; }
	@$(BIN)/python -m servelab_autograder.runner.sandbox --setup --users $(SANDBOX_USERS)

release: setup
	$(BIN)/python -m servelab_autograder.course.release

release-if-stale: setup
	@$(BIN)/python -m servelab_autograder.course.release --if-stale

# The learner's lab serves course/ without nbgrader's instructor tools or the news pop-up (lab/learner, for this
# server only); the instructor's serves the repository with formgrader and Create Assignment.
LEARNER_LAB := $(CURDIR)/lab/learner
LOCAL_LAB := $(CURDIR)/lab/local
lab: setup release-if-stale
	JUPYTER_CONFIG_PATH=$(LOCAL_LAB):$(LEARNER_LAB)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	  $(BIN)/jupyter lab --notebook-dir=course --LabApp.app_settings_dir=$(LEARNER_LAB)/settings \
	  --LabApp.default_url=/lab/tree/README.md --ServerApp.ip=$(IP) --ServerApp.port=$(PORT) $(LAB_ARGS) \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root ) 2>&1 | $(BIN)/python scripts/lab_url.py

lab-instructor: setup release-if-stale
	$(BIN)/jupyter lab --notebook-dir=. --ServerApp.ip=$(IP) --ServerApp.port=$(PORT) $(LAB_ARGS) \
	  $$( [ "$$(id -u)" = 0 ] && echo --allow-root ) 2>&1 | $(BIN)/python scripts/lab_url.py

# Grade your own course/ notebooks (all, or CH=ch03 / CH=ch03_token_budget) with the hidden tests, in the sandbox
# when this machine has one; never changes them (only the chapter asked for is rebuilt first, if its sources
# changed). Progress: .servelab/progress.json.
CH ?=
check: setup
	@$(BIN)/python -m servelab_autograder.course.release --if-stale $(CH)
	@$(BIN)/python -m servelab_autograder.course.check $(CH)

# pytest-xdist workers: one more than the cores by default, since many tests spend their time waiting on a
# process of their own (the sandboxed grader, nbgrader, JupyterLab and Chromium, a grading that must time out)
# and a worker that waits leaves its core to the others. --dist loadscope keeps each test module and each
# notebook (its cells share one kernel, in order) on one worker; the autograde module then runs beside the rest.
# --no-loadscope-reorder keeps the collection order, in which conftest.py puts the long modules first: started
# last (xdist's default orders modules by their number of tests), one of them alone made the suite's tail.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
# as root, the hub's course environment too: tests/test_hub.py runs a course on it (it skips without root)
HUB_TEST_DEPS := $(if $(filter 0,$(shell id -u)),hub-deps,)
test: setup browser-deps sandbox-deps $(HUB_TEST_DEPS)
	@mkdir -p bench/out
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder \
	  --junitxml=bench/out/pytest.xml $(PYTEST_ARGS)
	@$(BIN)/python scripts/test_durations.py --top 8

# Retrain the capstone's tiny model (lib/servelab/engine/checkpoints/tiny) from data/tiny_corpus.txt: about 8
# minutes on 2 cores, bitwise the same weights on one machine and thread count
model: setup
	$(BIN)/python scripts/train_tiny_model.py

solutions: setup
	$(BIN)/python -m servelab_autograder.course.execute solutions/*/*.ipynb

# WORKERS=N grades on a Dask LocalCluster of N workers, DASK=tcp://host:8786 on a running cluster's scheduler
# (one task per submission; this machine alone writes the gradebook); neither: the local process pool.
WORKERS ?=
DASK ?= $(if $(WORKERS),local,)
autograde: setup
	$(BIN)/python -m servelab_autograder.runner.grade $(SUBMISSIONS) $(if $(DASK),--dask $(DASK)) \
	  $(if $(WORKERS),--jobs $(WORKERS)) $(GRADE_ARGS)

# How alike a chapter's submissions are, pairwise and against the solution and the library (copydetect): an HTML
# report for the instructor, autograder/runs/similarity/<chapter>.html
similarity: setup
	@test -n "$(CH)" || { echo "name the chapter: make similarity CH=ch12"; exit 2; }
	$(BIN)/python -m servelab_autograder.course.similarity $(CH) --submitted $(SUBMISSIONS)

# A course for many learners on this server (as root): JupyterHub on 127.0.0.1:$(HUB_PORT) with PAM logins, each
# learner's lab run as that Linux user from the course environment in $(HUB_PREFIX), nbgrader's exchange in
# $(HUB_EXCHANGE). Accounts come from a CSV roster (hub/roster.py); the instructor's steps are hub/course.py's.
HUB_PREFIX ?= /opt/servelab-hub
HUB_EXCHANGE ?= /srv/nbgrader/exchange
HUB_PORT ?= 8000
HUB_IP ?= 127.0.0.1
HUB_PY := $(HUB_PREFIX)/venv/bin/python
ROSTER ?= roster.csv
INSTRUCTOR ?=
COURSE_ARGS = $(if $(INSTRUCTOR),--instructor $(INSTRUCTOR))
hub-deps: release-if-stale
	@bash hub/install.sh $(HUB_PREFIX) $(HUB_EXCHANGE)

hub: hub-deps
	cd $(HUB_PREFIX) && SERVELAB_HUB_PREFIX=$(HUB_PREFIX) SERVELAB_HUB_IP=$(HUB_IP) SERVELAB_HUB_PORT=$(HUB_PORT) \
	  $(HUB_PREFIX)/venv/bin/jupyterhub -f $(CURDIR)/hub/jupyterhub_config.py

hub-roster: hub-deps
	SERVELAB_HUB_PREFIX=$(HUB_PREFIX) $(HUB_PY) hub/roster.py $(ROSTER)

hub-release hub-collect hub-feedback: hub-deps
	@test -n "$(CH)" || { echo "name the chapter: make $@ CH=ch01_continuous_batching"; exit 2; }
	SERVELAB_HUB_PREFIX=$(HUB_PREFIX) $(HUB_PY) hub/course.py $(@:hub-%=%) $(CH) $(COURSE_ARGS)

hub-similarity: setup
	@test -n "$(CH)" || { echo "name the chapter: make $@ CH=ch01_continuous_batching"; exit 2; }
	SERVELAB_HUB_PREFIX=$(HUB_PREFIX) $(BIN)/python hub/course.py similarity $(CH) $(COURSE_ARGS)

# everything a course needs to go on elsewhere: accounts and password hashes, each instructor's course folder and
# gradebook, nbgrader's exchange (hub/backup.py); root only
hub-backup: hub-deps
	@test -n "$(TO)" || { echo "name the file: make hub-backup TO=course.tar.gz"; exit 2; }
	SERVELAB_HUB_PREFIX=$(HUB_PREFIX) $(HUB_PY) hub/backup.py backup $(TO)

hub-restore: hub-deps
	@test -n "$(FROM)" || { echo "name the file: make hub-restore FROM=course.tar.gz"; exit 2; }
	SERVELAB_HUB_PREFIX=$(HUB_PREFIX) $(HUB_PY) hub/backup.py restore $(FROM)

hub-autograde: setup sandbox-deps
	@test -n "$(CH)" || { echo "name the chapter: make $@ CH=ch01_continuous_batching"; exit 2; }
	SERVELAB_HUB_PREFIX=$(HUB_PREFIX) $(BIN)/python hub/course.py autograde $(CH) $(COURSE_ARGS) \
	  $(if $(WORKERS),--workers $(WORKERS)) $(if $(DASK),--dask $(DASK))

# Mutation testing of the hidden tests (all chapters, or CH=ch04): one line per chapter, "chNN: K killed, E equivalent
# (explained), S survived", each survivor with its id and changed line; exit 1 on a survivor. Not part of `make test`
# (about 10 minutes on the 2-core machine); tests/test_mutants.py checks the committed equivalent lists instead.
MUTANT_JOBS ?= 2
# Every chapter at once also records the report in bench/results.md (scripts/bench_mutants.py).
mutants: setup
	$(if $(CH),$(BIN)/python -m servelab_autograder.judge.mutants $(CH) --jobs $(MUTANT_JOBS),\
	  $(BIN)/python scripts/bench_mutants.py --write --jobs $(MUTANT_JOBS))

lint: setup
	$(BIN)/ruff check lib autograder tests scripts hub

bench: setup
	$(BIN)/python scripts/bench.py
	$(BIN)/python scripts/bench_engine.py --write
	$(BIN)/python scripts/bench_hf.py --write
	$(BIN)/python scripts/bench_vllm_scheduler.py --write
	$(BIN)/python scripts/bench_simulator.py -n 20000 --write
	$(BIN)/python scripts/bench_simulator.py --million --write
	$(BIN)/python scripts/bench_peers.py --write $(if $(NANO_VLLM),--nano-vllm $(NANO_VLLM))

clean:
	rm -rf $(VENV) autograder/gradebook.db autograder/submitted autograder/autograded autograder/feedback
