#!/usr/bin/env bash
# The build_routes.pip_install test: `pip install .` into a fresh virtual environment, then the
# README's Python snippet and the tessel CLI from outside the source tree.
#   pip_install_test.sh SOURCE_DIR WORK_DIR CXX_COMPILER [COMPILER_LAUNCHER]
# The build reuses the main build's compiled objects through ccache when the main build has it:
# pip builds a copy of the sources, SOURCE_DIR-relative paths identical to SOURCE_DIR/build's
# (WORK_DIR/src with its build/ folder, under CCACHE_BASEDIR=SOURCE_DIR), with the same compiler,
# generator and build type, and --no-build-isolation with Debian's pybind11 and the wheelhouse's
# scikit-build-core (scripts/install-deps.sh), so nothing is downloaded.
set -euo pipefail
src=$1 work=$2 compiler=$3 launcher=${4:-}
python=/usr/bin/python3

rm -rf "$work"
mkdir -p "$work/src"
# The working tree's files (tracked and untracked, not ignored; a tracked file deleted in the
# tree is skipped), without build folders.
if git -C "$src" rev-parse --show-toplevel > /dev/null 2>&1; then
  git -C "$src" ls-files -z --cached --others --exclude-standard |
    (cd "$src" && tar --null -T - --ignore-failed-read -cf -) | tar -C "$work/src" -xf -
else
  tar -C "$src" --exclude='./build*' --exclude='./install*' --exclude='./.*' -cf - . |
    tar -C "$work/src" -xf -
fi
for f in pyproject.toml CMakeLists.txt README.md; do
  [ -f "$work/src/$f" ] || { echo "pip_install_test: copying the sources lost $f" >&2; exit 1; }
done

wheelhouse="$("$src/scripts/wheelhouse.sh")"
if ! ls "$wheelhouse"/scikit_build_core-*.whl > /dev/null 2>&1; then
  echo "pip_install_test: no scikit-build-core wheel in $wheelhouse; run scripts/install-deps.sh" >&2
  exit 1
fi
# --system-site-packages: numpy (1.x) and pip come from Debian, as for the module's other tests
# (--without-pip saves installing a second pip into every fresh venv).
"$python" -m venv --system-site-packages --without-pip "$work/venv"
venv_python="$work/venv/bin/python"
"$venv_python" -m pip install -q --no-index --find-links "$wheelhouse" scikit-build-core

export CMAKE_GENERATOR=Ninja
export CCACHE_BASEDIR="$work/src"
cmake_args="-DCMAKE_CXX_COMPILER=$compiler"
[ -n "$launcher" ] && cmake_args+=" -DCMAKE_CXX_COMPILER_LAUNCHER=$launcher"
CMAKE_ARGS="$cmake_args" "$venv_python" -m pip install -q --no-index --no-build-isolation \
  --config-settings=build-dir="$work/src/build" "$work/src"

# From a directory that holds no tessel sources: the installed package, not the tree.
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
"$venv_python" - "$src/README.md" > readme_snippet.py <<'PY'
import re, sys
readme = open(sys.argv[1]).read()
section = readme.split("\n## Python\n", 1)[1]
print(re.search(r"```python\n(.*?)```", section, re.S).group(1))
PY
"$venv_python" readme_snippet.py
"$venv_python" -c "import tessel, sys; assert tessel.__file__.startswith(sys.prefix), tessel.__file__"
PATH="$work/venv/bin:$PATH" tessel info | head -3
echo "pip_install_test: ok"
