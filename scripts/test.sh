#!/usr/bin/env bash
# make test: lint, unit tests, then the integration tests against a fresh local stack
# (Kafka, HBase + Thrift, Spark standalone, a YARN MiniCluster), which is stopped again
# whatever happens.
# pytest's exit 5 (no tests collected) counts as a failure here.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
started=0
cleanup() { [ "$started" = 1 ] && $bin/python scripts/stack.py down --wipe; }
trap cleanup EXIT

step() { echo; echo "== $*"; }
fail() { echo "make test: $*" >&2; exit 1; }

step "lint (ruff, mypy)"
$bin/ruff check src tests scripts || fail "ruff found problems"
$bin/mypy || fail "mypy found problems"

step "local stack"
$bin/python scripts/stack.py fetch || fail "could not fetch the jars"
# A stack already running (a developer's) is reused and left running: every test uses its
# own topic and table prefix. Otherwise a fresh one is started, and stopped at the end.
# (status is read whole first: with pipefail, `status | grep -q` fails whenever grep exits
# before status has written its last line, and the stack would be wrongly "reused")
services=$($bin/python scripts/stack.py status) || fail "stack.py status failed"
if grep -q stopped <<<"$services"; then
  started=1
  $bin/python scripts/stack.py up --spark --wipe || fail "the stack did not start"
else
  echo "reusing the running stack"
fi
$bin/python scripts/stack.py up --yarn | grep -E "yarn|error" || fail "YARN did not start"
# the job's Python environment for --archives, rebuilt so it holds this checkout's code
$bin/python scripts/yarn_pack.py || fail "could not pack the environment for YARN"

step "tests"
$bin/pytest --durations=25 "$@" tests/unit tests/integration
rc=$?
[ $rc -eq 5 ] && fail "pytest collected no tests"
[ $rc -ne 0 ] && fail "pytest failed (exit $rc)"
echo "make test: all tiers passed"
