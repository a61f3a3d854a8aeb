#!/usr/bin/env bash
# The README's main job, on a fresh Debian/Ubuntu machine: install what is missing (Java 17+ and
# the PostgreSQL JDBC driver through apt, when run as root or with sudo; a virtual environment
# with shardq[spark]) and run `shardq demo` on the embedded PostgreSQL. Arguments go to
# `shardq demo` (e.g. --tasks 20000). Exits non-zero unless every task was processed.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/system-deps.sh

python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/pip install -q -e '.[spark]'
exec .venv/bin/shardq demo "$@"
