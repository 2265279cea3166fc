#!/usr/bin/env bash
# The lowest-versions job: a fresh virtual environment in the temporary folder
# with every default dependency held at the lowest version pyproject.toml
# allows (scripts/lowest_pins.py), then the core and notebook tests. The lower
# bounds are the range the code is tested on: where this fails, raise the
# bound rather than leave it untrue. .ci/run runs it after the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d "${TMPDIR:-/tmp}/rollkit-lowest.XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
python3 scripts/lowest_pins.py > "$work/lowest.txt"
echo "lowest allowed versions: $(tr '\n' ' ' < "$work/lowest.txt")"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check -c "$work/lowest.txt" \
  -e . "pytest>=8" "pytest-asyncio>=0.23" "pytest-timeout>=2.3"
"$work/venv/bin/python" -m pip list --format=freeze 2>/dev/null | grep -iE "^($(sed 's/==.*//' "$work/lowest.txt" | paste -sd'|'))==" || true
# The core (lifecycle, trace, store, scoring, hooks) and the notebook face
# (widgets, plots, frames), which need nothing beyond the default install
# (the tests deselected read an inspect-ai log: the inspect extra).
# The venv first on PATH, as an activated one: tests run its `rollkit` command.
PATH="$work/venv/bin:$PATH" "$work/venv/bin/python" -m pytest -p no:cacheprovider -q -m "not slow" "$@" \
  $(grep -v '^#' scripts/core_tests.txt)
