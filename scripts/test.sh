#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what it needs, then runs
# the tests and every notebook (nbval). The README gives this command and
# .ci/run calls it, so CI proves the README.
set -euo pipefail
cd "$(dirname "$0")/.."

# scripts/test.sh --fast: the developer's lane. The core and notebook-face
# tests (scripts/core_tests.txt, the list the lowest-versions and
# newest-Python jobs run), nothing slow, no browser, agent CLI or oracle set
# up: minutes, not the whole suite's most of an hour.
if [ "${1:-}" = "--fast" ]; then
  shift
  python -m pip install -q -e ".[test]"
  # shellcheck disable=SC2046
  exec python -m pytest -p no:cacheprovider -q -m "not slow" "$@" $(grep -v '^#' scripts/core_tests.txt)
fi

# The browser tests drive Debian's chromium; a browser downloaded by a tool
# cannot be fetched on these machines.
if ! command -v chromium >/dev/null 2>&1; then
  as_root=""
  [ "$(id -u)" = 0 ] || as_root="sudo"
  $as_root apt-get update -qq
  $as_root apt-get install -y -qq chromium fonts-liberation >/dev/null
fi
# SandboxRuntime's tests (tests/test_sandbox_*.py) run programs in bubblewrap.
if ! command -v bwrap >/dev/null 2>&1; then
  as_root=""
  [ "$(id -u)" = 0 ] || as_root="sudo"
  $as_root apt-get update -qq
  $as_root apt-get install -y -qq bubblewrap >/dev/null
fi

python -m pip install -q -e ".[test]"
# TRL's data preparation proves the training exports (tests/test_export_training.py). Its
# dependencies pull torch (through accelerate), which that preparation does not import:
# installed without them, pinned.
python -c "import trl" 2>/dev/null || python -m pip install -q --no-deps "trl==1.16.0"

# Codex CLI, Claude Code and Gemini CLI, for the ready-harness tests (tests/test_harnesses.py),
# from the npm registry into a cache folder; pinned so a release cannot change
# the run. Their native binaries come as npm packages too: nothing else is fetched.
npm_prefix="${ROLLKIT_NPM_PREFIX:-$HOME/.cache/rollkit/npm}"
if command -v npm >/dev/null 2>&1; then
  mkdir -p "$npm_prefix"
  npm install --prefix "$npm_prefix" --no-audit --no-fund --loglevel=error \
    @openai/codex@0.171.0 @anthropic-ai/claude-code@2.1.197 @google/gemini-cli@0.61.0 >/dev/null \
    || echo "npm install of Codex CLI / Claude Code / Gemini CLI failed: their harness tests will be skipped" >&2
fi
# The last ipykernel 6.x, for tests/test_run_all.py, which runs every notebook
# as Run All does under both ipykernel majors: a venv that sees this
# environment's packages and differs only by ipykernel<7, cached like the npm
# tools (a test session builds it itself when it is missing).
python -c 'import sys; sys.path.insert(0, "tests"); from helpers import kernel_helpers; print("ipykernel 6 kernel:", kernel_helpers.ipykernel6_python())'

# The tools' own readers the fidelity oracle compares rk.load with
# (tests/test_fidelity.py): each in a venv of its own, where it cannot live
# beside rollkit's dependencies (harbor needs Python 3.12), pinned, cached
# like the npm tools. One that cannot be built is skipped by its test, which says why.
oracles="$HOME/.cache/rollkit-oracles"
if [ ! -x "$oracles/verifiers/bin/python" ]; then
  { python -m venv "$oracles/verifiers.building" \
    && "$oracles/verifiers.building/bin/python" -m pip install -q --disable-pip-version-check "verifiers==0.4.0" \
    && mv "$oracles/verifiers.building" "$oracles/verifiers"; } \
    || { rm -rf "$oracles/verifiers.building"; echo "verifiers 0.4.0 could not be installed: its oracle test will be skipped" >&2; }
fi
# verifiers beside rollkit, for rollkit's side of tests/test_verifiers_tasks.py:
# this environment's packages with verifiers 0.4.0 and its pins (mcp 2.0.0,
# openai 2.x) installed over them, rollkit taken from PYTHONPATH.
if [ ! -x "$oracles/rollkit-verifiers/bin/python" ]; then
  { python -m venv --system-site-packages "$oracles/rollkit-verifiers.building" \
    && "$oracles/rollkit-verifiers.building/bin/python" -m pip install -q --disable-pip-version-check "verifiers==0.4.0" \
    && mv "$oracles/rollkit-verifiers.building" "$oracles/rollkit-verifiers"; } \
    || { rm -rf "$oracles/rollkit-verifiers.building"; echo "verifiers 0.4.0 beside rollkit could not be installed: tests/test_verifiers_tasks.py will be skipped" >&2; }
fi
# Arize Phoenix, the trace back end tests/test_otel_export.py sends rollkit's
# OpenTelemetry spans to and reads them back from (heavy: its own venv).
if [ ! -x "$oracles/phoenix/bin/python" ]; then
  { python -m venv "$oracles/phoenix.building" \
    && "$oracles/phoenix.building/bin/python" -m pip install -q --disable-pip-version-check "arize-phoenix==20.26.1" \
    && mv "$oracles/phoenix.building" "$oracles/phoenix"; } \
    || { rm -rf "$oracles/phoenix.building"; echo "arize-phoenix 20.26.1 could not be installed: its OpenTelemetry test will be skipped" >&2; }
fi
py312=""
if python3.12 -c "" 2>/dev/null; then
  py312=python3.12
elif command -v pyenv >/dev/null 2>&1; then
  found="$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.|$)' | tail -n 1)"
  [ -n "$found" ] && py312="$(pyenv root)/versions/$found/bin/python3.12"
fi
if [ ! -x "$oracles/harbor/bin/python" ] && [ -n "$py312" ]; then
  { "$py312" -m venv "$oracles/harbor.building" \
    && "$oracles/harbor.building/bin/python" -m pip install -q --disable-pip-version-check "harbor==0.26.0" \
    && mv "$oracles/harbor.building" "$oracles/harbor"; } \
    || { rm -rf "$oracles/harbor.building"; echo "harbor 0.26.0 could not be installed: its oracle test will be skipped" >&2; }
fi

python -m pytest tests notebooks --nbval-lax -p no:cacheprovider "$@"
