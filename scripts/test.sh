#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what it needs, then runs
# the tests and every notebook (nbval). The README gives this command and
# .ci/run calls it, so CI proves the README.
set -euo pipefail
cd "$(dirname "$0")/.."

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
python -c 'import sys; sys.path.insert(0, "tests"); import kernel_helpers; print("ipykernel 6 kernel:", kernel_helpers.ipykernel6_python())'

python -m pytest tests notebooks --nbval-lax -p no:cacheprovider "$@"
