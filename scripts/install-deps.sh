#!/usr/bin/env bash
# Installs the Debian packages tessel's build and tests need; installs only what is missing.
# Idempotent: a second run with everything present does nothing and touches no network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev
  libopenblas-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-matplotlib
  openmpi-bin libopenmpi-dev
  clang libclang-rt-14-dev
  ccache libdlpack-dev
  python3-venv python3-pip python3-packaging python3-pathspec
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# scikit-build-core, the build backend of `pip install .`, has no Debian 12 package: one pinned
# wheel (pure Python; its dependencies are the Debian packages above) is kept in a local
# wheelhouse, so that the pip-install test builds offline with --no-build-isolation.
wheelhouse="$("$(dirname "$0")/wheelhouse.sh")"
skbuild_wheel="scikit_build_core-0.10.7-py3-none-any.whl"
if [ ! -f "$wheelhouse/$skbuild_wheel" ]; then
  echo "install-deps: fetching $skbuild_wheel into $wheelhouse"
  mkdir -p "$wheelhouse"
  # Not fatal: only the pip-install test needs it; the builds and the demo do not.
  if ! /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheelhouse" \
      scikit-build-core==0.10.7; then
    echo "install-deps: could not fetch $skbuild_wheel (no PyPI access?); the test" \
         "build_routes.pip_install fails until it is in $wheelhouse" >&2
  fi
fi
