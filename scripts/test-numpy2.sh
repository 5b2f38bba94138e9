#!/usr/bin/env bash
# `make test-numpy2`: the Python module built and tested against PyPI's numpy 2 and pybind11 3,
# the stack of users' environments, next to Debian's numpy 1 and pybind11 2.10 that `make test`
# and CI use. Not part of either: it downloads from PyPI.
#   1. a virtual environment NP2_BUILD/venv from PYTHON, without Debian's site packages (their
#      numpy 1 would shadow numpy 2), with numpy>=2, pybind11>=3 and pytest from PyPI; an
#      existing one that already has them is reused without touching the network (delete it
#      to pick up newer releases);
#   2. a build directory NP2_BUILD configured with that venv's interpreter and pybind11
#      (-Dpybind11_DIR), building the module and the CLI (the CLI's tests use it);
#   3. the whole pytest suite with the venv's interpreter and DeprecationWarnings as errors (a
#      protocol numpy 2 deprecates, such as an __array__ without copy=, fails the run).
# Environment: PYTHON (default /usr/bin/python3), NP2_BUILD (default build-np2), JOBS (2),
# CMAKE_FLAGS (extra configure flags; the Makefile passes its ccache launcher).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python=${PYTHON:-/usr/bin/python3}
build=${NP2_BUILD:-build-np2}
jobs=${JOBS:-2}
venv="$build/venv"
venv_python="$venv/bin/python"
requirements=("numpy>=2" "pybind11>=3" "pytest")

has_requirements() {
  [ -x "$venv_python" ] && "$venv_python" - <<'PY' 2>/dev/null
import numpy, pybind11, pytest
assert int(numpy.__version__.split(".")[0]) >= 2, numpy.__version__
assert int(pybind11.__version__.split(".")[0]) >= 3, pybind11.__version__
PY
}

if has_requirements; then
  echo "test-numpy2: reusing $venv"
else
  if [ ! -x "$venv_python" ]; then
    echo "test-numpy2: creating $venv with $python ($("$python" --version 2>&1))"
    mkdir -p "$build"
    "$python" -m venv "$venv"
  fi
  echo "test-numpy2: installing ${requirements[*]} from PyPI"
  pip_log="$build/pip-install.log"
  # Bounded: one retry, 20 s per connection, instead of pip's minutes of back-off when offline.
  if ! "$venv_python" -m pip install --quiet --disable-pip-version-check --retries 1 --timeout 20 \
         "${requirements[@]}" > "$pip_log" 2>&1; then
    echo "test-numpy2: could not install ${requirements[*]} from PyPI (or the index pip is" \
         "configured with): this target needs network access to it. pip's output:" >&2
    tail -5 "$pip_log" | sed 's/^/  /' >&2
    exit 1
  fi
fi
"$venv_python" -c 'import numpy, pybind11, sys; print("test-numpy2: Python %s, numpy %s, pybind11 %s"
                   % (sys.version.split()[0], numpy.__version__, pybind11.__version__))'

# The library and CLI objects are those of the Debian build, so with ccache they are cache hits.
# shellcheck disable=SC2086  # CMAKE_FLAGS is a list of flags
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$venv_python" \
  -Dpybind11_DIR="$("$venv_python" -m pybind11 --cmakedir)" -DTESSEL_BUILD_TESTS=OFF \
  ${CMAKE_FLAGS:-}
cmake --build "$build" -j"$jobs" --target tessel_python tessel_cli

PYTHONPATH="$build/python" "$venv_python" -m pytest -q -p no:cacheprovider \
  -W error::DeprecationWarning python/tests
