# Entry points. `make demo` and `make test` work on a fresh Debian machine: they install what is
# missing, configure, build and run.
BUILD ?= build
JOBS ?= 2
PYTHON ?= /usr/bin/python3
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test check-tsan fuzz format clean

all: build

deps:
	./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/tools/tessel demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -LE stress
	PYTHONPATH=$(BUILD)/python $(PYTHON) -m pytest -q python/tests

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD) build-tsan build-fuzz
