#!/usr/bin/env bash
# Prints the folder tessel loads Intel MKL from (src/core/mkl_library.h): install-deps.sh unpacks
# PyPI's `mkl` wheel's libraries there, and the library looks in the same place at run time.
if [ -n "${TESSEL_MKL_DIR:-}" ]; then
  echo "$TESSEL_MKL_DIR"
else
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/tessel/mkl/lib"
fi
