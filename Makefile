# Entry points. `make demo` and `make test` work on a fresh Debian machine: they install what is
# missing, configure, build and run.
BUILD ?= build
JOBS ?= 2
PYTHON ?= /usr/bin/python3
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
# ccache where present (and CCACHE_DISABLE not set): every configure below gets it as the compiler
# launcher, with the repository root as its base directory, so that a build of a copy of the tree
# (the pip test's, a fresh clone's) reuses the compiled objects. Without ccache the library is
# built with precompiled headers instead (cmake/precompiled_headers.cmake says why not both).
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
ifeq ($(CCACHE_DISABLE),)
CMAKE_FLAGS += -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_CUDA_COMPILER_LAUNCHER=$(CCACHE)
export CCACHE_BASEDIR ?= $(CURDIR)
endif
endif
# mpirun as root needs --allow-run-as-root; --oversubscribe lets 4 processes share fewer cores.
MPIRUN ?= mpirun --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root)
MPI_PROCS ?= 2
# Compiler for check-tsan: g++ (the default build compiler; clang 14 lacks some C++20) or clang++.
TSAN_CXX ?= g++

.PHONY: all deps configure build demo demo-mpi test test-gpu test-numpy2 check-tsan check-tsan-ci check-asan fuzz ci format clean bench-peers

all: build

deps:
	./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The main job: nanoGPT's character GPT on tiny Shakespeare over a 2x2 (batch x model) mesh.
# Builds only the CLI; DEMO_ARGS adds or overrides options (e.g. DEMO_ARGS="--steps 2000").
DEMO_ARGS ?=
demo: configure
	cmake --build $(BUILD) -j$(JOBS) --target tessel_cli
	./$(BUILD)/tools/tessel train gpt --config tiny --mesh 2x2 --metrics $(BUILD)/gpt_metrics.csv $(DEMO_ARGS)
	$(PYTHON) scripts/plot_gpt_metrics.py $(BUILD)/gpt_metrics.csv $(BUILD)/gpt_loss.png \
	  "tessel train gpt --config tiny --mesh 2x2"

# The same GPT as MPI_PROCS processes (default 2) sharing the 2x2 mesh's four devices.
demo-mpi: configure
	cmake --build $(BUILD) -j$(JOBS) --target tessel_cli
	$(MPIRUN) -np $(MPI_PROCS) ./$(BUILD)/tools/tessel train gpt --config tiny --mesh 2x2 $(DEMO_ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -LE stress
	PYTHONPATH=$(BUILD)/python $(PYTHON) -m pytest -q python/tests

# For a machine with a GPU: the GPU suite (ctest label gpu: GPU devices, NCCL communicators, the
# op kernels), the suites on GPU devices (tests/testing/gpu_devices.h: the relayout property
# test, the collectives, the GPT on meshes, on the visible GPUs) and the Python GPU tests. Without
# a GPU the gpu cases report "skipped: no GPU" and the others run on simulated GPUs (make test
# runs them all too). scripts/gpu-check.sh is the same for a GPU machine without the build's
# dependencies. Strict f32 matmuls (TESSEL_MATMUL_PRECISION=highest), as the suites compare GPU
# results with the CPU's or NumPy's at f32's tolerance; the TF32 GEMMs' own test sets TF32 itself.
test-gpu: build
	cd $(BUILD) && TESSEL_MATMUL_PRECISION=highest ctest --output-on-failure -L gpu
	cd $(BUILD) && TESSEL_MATMUL_PRECISION=highest ctest --output-on-failure -R OnGpuDevices
	TESSEL_MATMUL_PRECISION=highest PYTHONPATH=$(BUILD)/python $(PYTHON) -m pytest -q -rs \
	  python/tests/test_gpu.py

# The Python module against PyPI's numpy 2 and pybind11 3 instead of Debian's numpy 1 and
# pybind11 2.10 (scripts/test-numpy2.sh): a venv NP2_BUILD/venv from PyPI (reused once made),
# the module and the CLI built in NP2_BUILD against it, then the whole pytest suite. Not part of
# make test or CI, which must not need the network; says so plainly when PyPI is unreachable.
NP2_BUILD ?= build-np2
test-numpy2: deps
	PYTHON=$(PYTHON) NP2_BUILD=$(NP2_BUILD) JOBS=$(JOBS) CMAKE_FLAGS="$(CMAKE_FLAGS)" \
	  ./scripts/test-numpy2.sh

# ThreadSanitizer build of the library and tests in build-tsan/, then the unit tests. die_after_fork=0:
# the crash tests fork a child that starts threads (a Runtime), which TSan otherwise ends.
check-tsan: deps
	CXX=$(TSAN_CXX) cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSEL_SANITIZE=thread -DTESSEL_BUILD_PYTHON=OFF -DTESSEL_WITH_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-tsan -j$(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 die_after_fork=0 $(TSAN_OPTIONS)" \
	  ctest --output-on-failure -j$(JOBS) -L unit

# The bounded version CI runs: ThreadSanitizer on the collective and replicate suites only
# (tests/comm, tests/replicate), in build-tsan-ci/.
check-tsan-ci: deps
	CXX=$(TSAN_CXX) cmake -S . -B build-tsan-ci -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSEL_SANITIZE=thread -DTESSEL_BUILD_PYTHON=OFF -DTESSEL_BUILD_TOOLS=OFF -DTESSEL_WITH_CUDA=OFF \
	  "-DTESSEL_TEST_LAYERS=comm;replicate" $(CMAKE_FLAGS)
	cmake --build build-tsan-ci -j$(JOBS) --target tessel_tests
	cd build-tsan-ci && TSAN_OPTIONS="halt_on_error=1 die_after_fork=0 $(TSAN_OPTIONS)" \
	  ctest --output-on-failure -j$(JOBS) -L unit -E '^(consumer|layering)'

# One clang AddressSanitizer/UBSan build in build-asan/ serves the fuzzers and the Python module.
ASAN_BUILD = build-asan
$(ASAN_BUILD)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSEL_SANITIZE=address -DTESSEL_BUILD_FUZZERS=ON -DTESSEL_BUILD_TESTS=OFF \
	  -DTESSEL_BUILD_TOOLS=OFF -DTESSEL_WITH_CUDA=OFF -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

# libFuzzer targets (ASan/UBSan), each run for FUZZ_SECONDS seconds.
fuzz: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j$(JOBS) --target fuzzers
	./fuzz/run_fuzzers.sh $(ASAN_BUILD) $(FUZZ_SECONDS) $(JOBS)

# The Python tests against the ASan/UBSan build of the module: a use after free or an overflow
# reached from Python fails the run instead of corrupting memory. python3 is not instrumented, so
# the sanitizer runtime is preloaded; Python's own allocations are not leak-checked.
ASAN_RUNTIME = $(shell clang -print-file-name=libclang_rt.asan-x86_64.so)
check-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j$(JOBS) --target tessel_python
	LD_PRELOAD=$(ASAN_RUNTIME) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONPATH=$(ASAN_BUILD)/python \
	  $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

# tessel side by side with Open MPI, JAX and PyTorch (bench/peers/run_peers.py; not part of make
# test): makes the peers' venv .venv-peers on first use (scripts/peers-venv.sh, pinned versions,
# reused afterwards), builds the CLI and the module, runs every workload alternating the peers
# and writes $(BUILD)/peers/peers.json and peers.png. PEERS_ARGS adds options, e.g.
# PEERS_ARGS=--quick (a few minutes) or PEERS_ARGS="--workloads all_reduce --repeat 5".
PEERS_ARGS ?=
bench-peers: configure
	./scripts/peers-venv.sh
	cmake --build $(BUILD) -j$(JOBS) --target tessel_cli tessel_python
	$(PYTHON) bench/peers/run_peers.py --build $(BUILD) $(PEERS_ARGS)

# What CI runs (.ci/run): every test, then the bounded sanitizer and fuzz checks.
ci: test check-tsan-ci check-asan fuzz

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD) build-tsan build-tsan-ci $(ASAN_BUILD) $(NP2_BUILD)
