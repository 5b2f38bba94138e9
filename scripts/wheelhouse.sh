#!/usr/bin/env bash
# Prints the folder of the local wheelhouse (the pinned wheels that have no Debian package), one
# place for install-deps.sh, which fills it, and the pip-install test, which installs from it.
echo "${TESSEL_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessel/wheels}"
