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
  python3-sklearn
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

# Intel MKL, the BLAS tessel prefers on an Intel CPU (include/tessel/core/blas.h: its GEMMs are
# 1.1-1.4x OpenBLAS's at a small model's shapes here), has no package in Debian's main archive:
# the pinned PyPI wheel is fetched once and the libraries a sequential LP64 sgemm needs are
# unpacked into scripts/mkl-dir.sh's folder (about 460 MB). Not fatal: without it tessel runs
# OpenBLAS, and says so (tessel info).
mkl_version="2026.2.0"
mkl_dir="$("$(dirname "$0")/mkl-dir.sh")"
if [ ! -f "$mkl_dir/libmkl_rt.so.3" ] && [ "$(uname -m)" = "x86_64" ]; then
  echo "install-deps: fetching MKL $mkl_version into $mkl_dir"
  mkl_download="$(mktemp -d)"
  if /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$mkl_download" \
      "mkl==$mkl_version"; then
    mkdir -p "$mkl_dir"
    /usr/bin/python3 - "$mkl_download"/mkl-*.whl "$mkl_dir" <<'PY'
import sys, zipfile, os
wheel, target = sys.argv[1], sys.argv[2]
keep = ("libmkl_rt.so.3", "libmkl_core.so.3", "libmkl_intel_lp64.so.3",
        "libmkl_sequential.so.3", "libmkl_def.so.3", "libmkl_mc3.so.3", "libmkl_avx2.so.3",
        "libmkl_avx512.so.3", "libmkl_avx10.so.3")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base in keep and "/data/lib/" in name:
            with z.open(name) as src, open(os.path.join(target, base + ".part"), "wb") as dst:
                dst.write(src.read())
# libmkl_rt last: its presence means the others are complete.
for base in sorted(keep, key=lambda b: b == "libmkl_rt.so.3"):
    os.replace(os.path.join(target, base + ".part"), os.path.join(target, base))
PY
  else
    echo "install-deps: could not fetch mkl==$mkl_version (no PyPI access?); tessel uses" \
         "OpenBLAS" >&2
  fi
  rm -rf "$mkl_download"
fi
