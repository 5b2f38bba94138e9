#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment for tessel's peer and reference code:
# <repo>/.venv-peers with JAX (CPU), PyTorch, numpy, safetensors and matplotlib at pinned versions
# (bench/peers/ runs the peers from it; examples/gpt/reference/ checks the GPT against it).
#
# Why a separate environment: the system interpreter (/usr/bin/python3) carries Debian's
# numpy 1.x, which tessel's Python bindings and tests are built against and which must stay
# as it is. JAX needs numpy 2.x, so the peers live in their own venv, made from the pyenv /
# PATH python3 (3.11+), never from /usr/bin/python3.
#
# Idempotent: a stamp file inside the venv records the pinned requirement list; when it
# matches, the script prints one line and touches no network. Changing a pin below (or
# deleting .venv-peers) makes the next run reinstall.
#
# Override the interpreter with PEERS_PYTHON=/path/to/python3.11 (must not be /usr/bin/python3).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv-peers"
stamp="$venv/.peers-stamp"

# Exact pins. jax[cpu] pulls jaxlib at the same version; jaxlib, ml_dtypes, opt_einsum and
# scipy are pinned too so that the whole numeric stack is reproducible.
requirements=(
  "jax[cpu]==0.10.2"
  "jaxlib==0.10.2"
  "numpy==2.4.6"
  "ml_dtypes==0.6.0"
  "opt_einsum==3.4.0"
  "scipy==1.17.1"
  "safetensors==0.8.0"
  "matplotlib==3.11.2"
  # PyTorch for bench/peers (torch.distributed over gloo, DTensor). PyTorch's CPU-only wheel
  # index is not reachable from this workplace, so this is PyPI's wheel, which pins (==) the
  # CUDA libraries it loads at import (about 3 GB, never used on a CPU machine); its own
  # pure-Python requirements are pinned here.
  "torch==2.15.0"
  "sympy==1.14.0"
  "networkx==3.6.1"
  "filelock==4.3.1"
  "jinja2==3.1.6"
  "fsspec==2026.9.0"
  "typing_extensions==4.16.0"
)
wanted="$(printf '%s\n' "${requirements[@]}")"

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  echo "peers-venv: $venv up to date ($(printf '%s ' "${requirements[@]}"| sed 's/ $//'))"
  exit 0
fi

# Pick the interpreter: PEERS_PYTHON, else python3 on PATH (pyenv's shim resolves to the real
# binary), else pyenv's. /usr/bin/python3 is refused on purpose.
pick_python() {
  local cand
  for cand in "${PEERS_PYTHON:-}" "$(command -v python3 || true)" \
              "$(pyenv which python3 2>/dev/null || true)"; do
    [ -n "$cand" ] || continue
    local real
    real="$("$cand" -c 'import sys; print(sys.executable)' 2>/dev/null)" || continue
    case "$real" in /usr/bin/python3*) continue ;; esac
    if "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
      echo "$real"
      return 0
    fi
  done
  return 1
}

if ! py="$(pick_python)"; then
  echo "peers-venv: no python3 >= 3.11 other than /usr/bin/python3 found;" \
       "install one with pyenv or set PEERS_PYTHON" >&2
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "peers-venv: creating $venv with $py ($("$py" --version 2>&1))"
  "$py" -m venv "$venv"
else
  echo "peers-venv: reusing $venv (pins changed or stamp missing)"
fi

echo "peers-venv: installing ${requirements[*]}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"

# Record the pins only after a successful install.
printf '%s\n' "$wanted" > "$stamp"
echo "peers-venv: installed:"
"$venv/bin/python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null \
  | grep -i -E '^(jax|jaxlib|numpy|ml.dtypes|opt.einsum|scipy|safetensors|matplotlib|torch)==' \
  | sed 's/^/  /'
echo "peers-venv: done; use $venv/bin/python"
