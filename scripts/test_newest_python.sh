#!/usr/bin/env bash
# The newest-Python job: the tests of scripts/core_tests.txt in a fresh
# virtual environment in the temporary folder, on the newest CPython this
# machine has (python3.14, 3.13 or 3.12 on PATH, else pyenv's), with every
# dependency at its newest. A newer Python changes what the same code
# computes (3.12's sum() compensates floats' rounding): this is where it
# shows. .ci/run runs it after the lowest-versions job; a machine with no
# Python newer than 3.11 says so and skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
newest=""
for version in 3.14 3.13 3.12; do
  if command -v "python$version" >/dev/null 2>&1 && "python$version" -c "" 2>/dev/null; then
    newest="python$version"
  elif command -v pyenv >/dev/null 2>&1; then
    found="$(pyenv versions --bare 2>/dev/null | grep -E "^${version//./\\.}\.[0-9]+$" | sort -V | tail -n 1 || true)"
    [ -n "$found" ] && newest="$(pyenv root)/versions/$found/bin/python$version"
  fi
  [ -n "$newest" ] && break
done
if [ -z "$newest" ]; then
  echo "no Python 3.12 or newer on this machine: the newest-Python job is skipped"
  exit 0
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/rollkit-newest.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$newest" -m venv "$work/venv"
echo "newest Python: $("$work/venv/bin/python" --version)"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check -e . "pytest>=8" "pytest-asyncio>=0.23" "pytest-timeout>=2.3"
PATH="$work/venv/bin:$PATH" "$work/venv/bin/python" -m pytest -p no:cacheprovider -q -m "not slow" "$@" \
  $(grep -v '^#' scripts/core_tests.txt)
