# Entry points. `make demo` and `make test` work on a fresh Debian machine: they install what is
# missing, configure, build and run.
BUILD ?= build
JOBS ?= 2
PYTHON ?= /usr/bin/python3
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
# Compiler for check-tsan: g++ (the default build compiler; clang 14 lacks some C++20) or clang++.
TSAN_CXX ?= g++

.PHONY: all deps configure build demo test check-tsan fuzz format clean

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

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -LE stress
	PYTHONPATH=$(BUILD)/python $(PYTHON) -m pytest -q python/tests

# ThreadSanitizer build of the library and tests in build-tsan/, then the unit tests.
check-tsan: deps
	CXX=$(TSAN_CXX) cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSEL_SANITIZE=thread -DTESSEL_BUILD_PYTHON=OFF $(CMAKE_FLAGS)
	cmake --build build-tsan -j$(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 $(TSAN_OPTIONS)" \
	  ctest --output-on-failure -j$(JOBS) -L unit

# libFuzzer targets (clang, ASan/UBSan) in build-fuzz/, each run for FUZZ_SECONDS seconds.
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSEL_BUILD_FUZZERS=ON -DTESSEL_BUILD_PYTHON=OFF -DTESSEL_BUILD_TESTS=OFF \
	  -DTESSEL_BUILD_TOOLS=OFF
	cmake --build build-fuzz -j$(JOBS)
	./fuzz/run_fuzzers.sh build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD) build-tsan build-fuzz
