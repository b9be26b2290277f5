# Everything a fresh clone needs, from nothing but Python: `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.runtime
# The stand-in for the GPU machine's image that the rehearsal of the GPU call runs in
# (below); named here, before `test` lists it (make reads a rule's prerequisites as it
# meets them).
GPU_VENV  := .venv-gpu
GPU_STAMP := $(GPU_VENV)/.installed
TORCH_VERSION ?= 2.13.0
# Where a CPU-only torch comes from when pip's own configuration has none (e.g.
# PyTorch's CPU wheel index); empty: pip's configured index and find-links.
TORCH_CPU_INDEX ?=

# The suite's processes: each takes whole test files (a module's fixtures are made once),
# the slowest files first (tests/conftest.py orders them).  The slowest tests are listed
# at the end, to keep the suite within its budget.
TEST_WORKERS ?= 2

.PHONY: install runtime demo examples test lint docs screenshots bench peers clean image

# `runtime`: what the product itself needs (torch, then `pip install -e .`), all the
# demo installs. `install`: that, the optional engines and stores, and the development
# toolchain the tests need.
runtime: $(RUNTIME)
install: $(STAMP)

# torch goes in first so that the packages depending on it find it satisfied and pull
# nothing more. No NVIDIA GPU: the CPU build (the local wheel directory pip is configured
# with, or $(TORCH_CPU_INDEX)). An NVIDIA GPU: PyPI's default Linux build, which is CUDA.
# $(1): the venv's bin folder.
define install_torch
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: installing the CUDA build of torch $(TORCH_VERSION)"; \
		PIP_FIND_LINKS= $(1)/pip install "torch==$(TORCH_VERSION)"; \
	else \
		echo "no NVIDIA GPU: installing the CPU build of torch $(TORCH_VERSION)"; \
		$(1)/pip install "torch==$(TORCH_VERSION)" \
			$(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX)); \
	fi
endef

# The CPU kernel of strategy `fused` is built once per machine (about 7 s, with the
# system's C++ compiler), here rather than on a job's first model; without a compiler the
# other strategies still run.
$(RUNTIME): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(call install_torch,$(BIN))
	$(BIN)/pip install -e .
	$(BIN)/python -c "from scoring._compiler.walk_library import kernel_library; kernel_library()" \
		|| echo "warning: no C++ compiler: strategy 'fused' is unavailable on CPU (install g++)"
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(BIN)/pip install -e '.[dev,ray,spark,catboost,onnx,postgres,s3,metrics,mlflow,delta,iceberg,triton]'
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ]; then \
		echo "warning: no Java runtime: the Spark engine and its tests need Java 17 or 21."; \
		echo "  Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17; or set JAVA_HOME"; \
	elif [ "$$v" -lt 17 ]; then \
		echo "warning: Java $$v found; PySpark 4 needs Java 17 or 21 (apt-get install openjdk-17-jre-headless, then set JAVA_HOME)"; \
	else echo "Java $$v found: the Spark engine can run"; fi
	touch $(STAMP)

demo: runtime
	$(BIN)/scoring demo

# The registry and input the job files in jobs/ read (../examples/ from each); then the
# models/ files applied to that registry, which already matches them (nothing changes).
examples: runtime
	$(BIN)/scoring examples examples
	$(BIN)/scoring models apply models/ --registry examples/registry

test: install $(GPU_STAMP)
	$(BIN)/ruff check scoring tests benchmarks docs/hooks docs/tools
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(MAKE) --no-print-directory docs
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

# The documentation site, into site/: strictly (a broken link, a missing page or an
# unresolved reference fails it); its reference pages are generated from the code.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@echo "the site is in site/ (open site/index.html)"

# The job report pictures in docs/, made again from real runs and rendered by headless
# Chromium (apt-get install chromium).
screenshots: install
	$(BIN)/python docs/tools/screenshots.py

lint: install
	$(BIN)/ruff check scoring tests benchmarks docs/hooks docs/tools
	$(BIN)/ruff format --check scoring tests benchmarks docs/hooks docs/tools
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

bench: install
	$(BIN)/python benchmarks/compile_throughput.py

# The CPU league table: the peers a user would pick instead (oneDAL, lleaves,
# treelite/tl2cgen, ONNX Runtime, snapml, Hummingbird) in an environment of their own:
# never the product's dependencies.
PEERS_VENV := .venv-peers
$(PEERS_VENV)/.installed: pyproject.toml benchmarks/peers.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(call install_torch,$(PEERS_VENV)/bin)
	$(PEERS_VENV)/bin/pip install -e . -r benchmarks/peers.txt
	touch $@

# The rehearsal of the prepared GPU call (tests/test_gpu_image.py): a venv of only
# packages the GPU machine's image holds, at its Triton (benchmarks/gpu/image.txt, with
# torch's CPU build standing in), and the call's wheels fetched for this venv's Python
# into its wheels/ folder, which the rehearsal installs as the GPU machine does.  pandas
# brings tzdata, which the image lacks: removed, as pandas runs without it.  CatBoost,
# too big to carry, goes into catboost/ beside the venv, for the interpreter parity of
# its recipes under the image's Triton.
$(GPU_STAMP): benchmarks/gpu/image.txt benchmarks/gpu/wheels.sh Makefile
	rm -rf $(GPU_VENV)
	$(PYTHON) -m venv $(GPU_VENV)
	$(call install_torch,$(GPU_VENV)/bin)
	$(GPU_VENV)/bin/pip install -r benchmarks/gpu/image.txt
	$(GPU_VENV)/bin/pip uninstall -y tzdata
	PYTHON=$(GPU_VENV)/bin/python DEST=$(GPU_VENV)/wheels \
		WHEEL_PYTHON=$$($(GPU_VENV)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
		bash benchmarks/gpu/wheels.sh
	$(GPU_VENV)/bin/pip install --no-deps --target $(GPU_VENV)/catboost catboost six graphviz
	touch $@

peers: $(PEERS_VENV)/.installed
	$(PEERS_VENV)/bin/python benchmarks/peers.py

clean:
	rm -rf $(VENV) $(PEERS_VENV) $(GPU_VENV) .pytest_cache .mypy_cache .ruff_cache

# The CPU image (Containerfile), tagged with the product's version, then the demo run in
# it as a smoke test. Needs podman (Debian: apt-get install podman runc mmdebstrap); the
# base image is made from Debian's packages when absent, as no registry is reached. runc
# and these ulimits: crun fails on hosts with hybrid cgroups and low limits. pip's own
# settings reach the build: PIP_FIND_LINKS (a wheel folder, mounted) and PIP_CERT (a
# proxy's CA bundle, mounted).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= scoring
BASE_IMAGE ?= scoring-base:bookworm
PODMAN_FLAGS ?= --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024
image:
	@command -v podman >/dev/null || { echo "make image needs podman: apt-get install podman runc mmdebstrap"; exit 1; }
	podman image exists $(BASE_IMAGE) || { \
		mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates,g++,libgomp1 \
			bookworm - | podman import - $(BASE_IMAGE); }
	podman build $(PODMAN_FLAGS) --network host --build-arg BASE=$(BASE_IMAGE) \
		--build-arg VARIANT=cpu --build-arg TORCH_VERSION=$(TORCH_VERSION) \
		$(if $(PIP_FIND_LINKS),-v $(PIP_FIND_LINKS):$(PIP_FIND_LINKS):ro --build-arg PIP_FIND_LINKS=$(PIP_FIND_LINKS)) \
		$(if $(TORCH_CPU_INDEX),--build-arg TORCH_CPU_INDEX=$(TORCH_CPU_INDEX)) \
		$(if $(PIP_CERT),-v $(PIP_CERT):/etc/pip-ca.crt:ro --build-arg PIP_CERT=/etc/pip-ca.crt) \
		-f Containerfile -t $(IMAGE):$(VERSION)-cpu .
	podman run --rm $(PODMAN_FLAGS) $(IMAGE):$(VERSION)-cpu demo --rows 100000
	@podman image inspect $(IMAGE):$(VERSION)-cpu --format 'built $(IMAGE):$(VERSION)-cpu, {{.Size}} bytes'
