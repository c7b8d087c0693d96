# Kiln — top-level entry points. `make demo` and `make test` do all set-up themselves:
# install missing Debian packages, create the Python venv, configure, build incrementally.
LLVM_VERSION := $(shell tr -d '[:space:]' < cmake/llvm-version)
BUILD_DIR    ?= build
BUILD_TYPE   ?= Release
JOBS         ?= $(shell nproc)
LLVM_PREFIX  := /usr/lib/llvm-$(LLVM_VERSION)
CCACHE       := $(shell command -v ccache 2>/dev/null)
# Lets ccache reuse objects between checkouts (absolute paths under the tree
# are hashed relative to it).
export CCACHE_BASEDIR := $(CURDIR)
# The Python bindings and tests use a venv the build creates from Debian's
# python3 (whose headers python3-dev provides), with PyPI packages from
# python/requirements-dev.txt.
VENV         := $(BUILD_DIR)/venv
PYTHON       := $(VENV)/bin/python

.PHONY: all deps venv configure build test demo clean gpu-bundles

all: build

deps:
	@./scripts/install-deps.sh

$(VENV)/.stamp: python/requirements-dev.txt | deps
	@mkdir -p $(BUILD_DIR)
	@test -x $(PYTHON) || /usr/bin/python3 -m venv $(VENV)
	@$(PYTHON) -m pip install -q --disable-pip-version-check -r python/requirements-dev.txt
	@touch $@

venv: $(VENV)/.stamp

$(BUILD_DIR)/build.ninja: CMakeLists.txt cmake/llvm-version | deps venv
	@mkdir -p $(BUILD_DIR)
	@cmake -S . -B $(BUILD_DIR) -G Ninja -Wno-dev \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DPython3_EXECUTABLE=$(abspath $(PYTHON)) \
	  -DCMAKE_C_COMPILER=$(LLVM_PREFIX)/bin/clang \
	  -DCMAKE_CXX_COMPILER=$(LLVM_PREFIX)/bin/clang++ \
	  $(if $(CCACHE),-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) \
	  > $(BUILD_DIR)/configure.log 2>&1 || { cat $(BUILD_DIR)/configure.log; exit 1; }

configure: deps venv $(BUILD_DIR)/build.ninja

build: configure
	@ninja -C $(BUILD_DIR) -j$(JOBS) --quiet

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS); rc=$$?; \
	  echo "== summaries of the test runners (lit, Catch2) =="; \
	  grep -hE '^(Total Discovered Tests|  Passed|  Failed|  Unsupported|All tests passed|test cases:|[0-9]+ (passed|failed))' Testing/Temporary/LastTest.log; \
	  exit $$rc

demo: build
	@./scripts/demo.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)

# Bundles for the device check (test/gpu/run_gpu_checks.sh), compiled here
# where the compiler lives; KILN_GPU_TARGET picks the GPU (default sm_90a).
# The device check's bundles: the default target (sm_90a: wgmma) and sm_90
# (mma.sync), so one device run compares them and a fault in one loses nothing.
gpu-bundles: build
	bash test/gpu/build-bundles.sh build/gpu-bundles
	KILN_GPU_TARGET=sm_90 bash test/gpu/build-bundles.sh build/gpu-bundles-sm_90
