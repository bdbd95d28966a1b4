# The two Quick-start commands: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt pyproject.toml | sha1sum | cut -c1-12)

.PHONY: run test test-fast lint typecheck pytest bench gpu-check install browser oidc-provider sandbox containers test-images clean-var

# uv installs the pinned requirements (pip stays in the venv: environments are built with it).
# From uv's cache alone when it holds every pin, as on a second clone (seconds, where pip took
# two minutes re-checking the index); from the index otherwise. Bytecode is compiled ahead, as
# pip did: sandboxed tasks cannot write it, and would compile TensorFlow on every start.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv pip install --quiet --python $(PY) --compile-bytecode

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv==$(UV_VERSION)
	$(UV) --offline -r requirements.txt 2>/dev/null || $(UV) -r requirements.txt
	$(UV) --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# The image's lock: what the platform runs on (requirements-app.in) at requirements.txt's pins,
# without the development and test tools.
requirements-app.txt: requirements-app.in requirements.txt
	$(VENV)/bin/uv pip compile --quiet --python-version 3.11.7 --python-platform x86_64-manylinux_2_28 \
		--constraint requirements.txt --no-annotate --custom-compile-command "make requirements-app.txt" \
		requirements-app.in -o $@

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "Install Debian's chromium (apt-get install chromium) for the browser tests"; fi; }

# npm's oidc-provider, the real OpenID provider the single sign-on test signs in with: its locked
# packages, installed again only when the lock changes (npm ci stamps node_modules). Node.js 20.19
# or later: Debian 12's own is older.
OIDC_PROVIDER := tests/tfplatform/web/oidc_provider
oidc-provider:
	@if command -v npm >/dev/null 2>&1; then \
	  [ $(OIDC_PROVIDER)/node_modules/.package-lock.json -nt $(OIDC_PROVIDER)/package-lock.json ] || \
	    (cd $(OIDC_PROVIDER) && npm ci --no-audit --no-fund --loglevel=error); \
	else echo "Install Node.js 20.19 or later with npm for the single sign-on test"; fi

# Debian's bubblewrap: the default trial runtime sandboxes every task with it (and Landlock).
# As root, a node also builds each gang across nodes a network of its own: iproute2 and nftables.
sandbox: install
	@command -v bwrap >/dev/null 2>&1 && { [ "$$(id -u)" != 0 ] || PATH="$$PATH:/usr/sbin:/sbin" command -v nft >/dev/null 2>&1 && PATH="$$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap nftables iproute2 >/dev/null; \
	  else echo "Trials run sandboxed: install Debian's bubblewrap (apt-get install bubblewrap)," \
	    "or set PLATFORM_TRIAL_RUNTIME=process to run them without isolation"; exit 1; fi; }
	@$(PY) -m training.isolation.runtime

# Debian's podman (with runc) and debootstrap: the podman trial runtime the tests also run trials
# under, and the root filesystem of a base image with its own Python for the derived-image tests.
containers:
	@command -v podman >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && command -v iptables >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq podman runc netavark aardvark-dns iptables debootstrap >/dev/null; \
	  else echo "The podman runtime tests need Debian's podman and debootstrap (apt-get install podman runc netavark aardvark-dns iptables debootstrap)"; fi; }

run: install $(if $(filter process,$(PLATFORM_TRIAL_RUNTIME)),,sandbox)
	DJANGO_DEBUG=true $(PY) manage.py migrate --noinput
	DJANGO_DEBUG=true $(PY) manage.py platform_bootstrap
	@echo ""
	@echo "  TF Platform: http://127.0.0.1:$${PORT:-8000}/   (API docs: /api/docs/, Ctrl-C stops everything)"
	@echo ""
	DJANGO_DEBUG=true PLATFORM_WORKSPACE_LAB_ORIGIN=http://127.0.0.1:$$(( $${PORT:-8000} + 100 )) \
		$(VENV)/bin/honcho start -f Procfile -p $${PORT:-8000}

lint: install
	$(VENV)/bin/ruff check .
	PYTHONPATH=platform:. $(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir var/docs-site

typecheck: install
	$(VENV)/bin/mypy platform/tfplatform platform/tfplatform_cli confinement training serving bench manage.py

# pytest-xdist: the suite waits on the processes it starts more than it computes, so it runs
# more workers than cores (twice the cores, at least 4). Each worker has its own test database,
# var folder, broker and cache keys; tests that share something of the machine's run on one
# worker (--dist loadgroup; tests/conftest.py). PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n * 2 > 4 ? n * 2 : 4 )))
PYTEST_XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

# Bytecode compiled once, before the suite: where the environment says PYTHONDONTWRITEBYTECODE
# (as the image does), every process the suite starts would compile the platform from source
# again: each worker node, web app and scheduler (0.6 CPU-s apiece) and each task host, whose
# sandbox cannot write it (0.3). pytest itself then caches its rewritten test modules.
PYTEST := $(PY) -m compileall -q -j 0 platform training confinement serving >/dev/null && \
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest

# The suite's container images (a debootstrap root with its own Python, the image derived from
# it with TensorFlow, the compose stack's), each built once per machine and tagged by its recipe:
# built here, alone, rather than inside the suite against its other tests and their time limits.
test-images: install containers
	$(PY) -m tests.images

pytest: install browser oidc-provider sandbox containers test-images
	$(PYTEST) $(PYTEST_XDIST)

# The local loop: what trains no real model, starts no real process and drives no browser.
test-fast: install
	$(PYTEST) $(PYTEST_XDIST) -m "not slow and not browser"

test: lint typecheck pytest

bench: install
	$(PY) -m bench

# On a machine with an NVIDIA GPU, with or without this project installed (its python needs
# pytest, nvidia-ml-py and Django; PyTorch for the utilization and MPS checks): what NVML says
# of the card, as the node records it, and a share held to its memory by MPS.
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu-check:
	PYTHONPATH=platform:.:$$PYTHONPATH $(GPU_PYTHON) -m pytest -p no:cacheprovider --noconftest \
	    -c /dev/null --rootdir . -v -s -rs tests/tfplatform/cluster/test_discovery_real_gpu.py

clean-var:
	rm -rf var
