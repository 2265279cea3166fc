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

python -m pip install -q -e ".[test]"
python -m pytest tests notebooks --nbval-lax -p no:cacheprovider "$@"
