#!/usr/bin/env bash
# make test / make test-fast: lint, the unit tests (before any JVM starts), then the
# integration tests against the local stack, which is stopped again if this script started it.
#
#   scripts/test.sh        everything: first the `serial` tests alone (they stop or kill
#                          shared services, or judge timing), then the quiet modules three
#                          at a time on one stack (the cluster tests on one worker, in turn), then
#                          the integration core again on pyspark 3.5 (.venv-spark35), its
#                          standalone cluster restarted from Spark 3.5's jars; last, on a
#                          stack it started, the multinode tier on the cluster stack
#                          (three Kafka nodes, two HBase masters, two region servers)
#   scripts/test.sh fast   unit + the integration tests that are neither faults, cluster,
#                          slow nor serial; Kafka and HBase only
#   scripts/test.sh all    everything, the `deep` tests too: the variants (another store,
#                          model or kill point) and single faults whose code paths the rest
#                          already takes, and the whole core again on pyspark 3.5. `make
#                          test` (CI) leaves them out to stay well inside CI's time on a
#                          slow day: on two cores the suite is bound by CPU, not by waiting
#
# Extra arguments go to every pytest call. pytest's exit 5 (no tests collected) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=full
case "${1:-}" in fast|all) mode=$1; shift ;; esac
# make test leaves the deep tests out; make test-all runs them
deep=$([ $mode = all ] || echo " and not deep")
bin=.venv/bin
results=.test-results
started=0
# (wait: a stack start still running in the background ends before the stack is stopped)
cleanup() { wait; [ "$started" = 1 ] && $bin/python scripts/stack.py down --wipe; }
trap cleanup EXIT
rm -rf "$results" && mkdir -p "$results"
t0=$SECONDS

step() { echo; echo "== $* ($((SECONDS - t0))s)"; }
fail() { echo "make test: $*" >&2; exit 1; }
tests() {  # NAME ARGS...: one pytest run, its results kept for the summary
  local name=$1; shift
  ${pytest:-$bin/pytest} --durations=25 --junitxml="$results/$name.xml" "$@"
  local rc=$?
  [ $rc -eq 5 ] && fail "pytest collected no tests ($name)"
  [ $rc -ne 0 ] && failed="$failed $name"
  return 0
}
failed=""
spark_on() {  # PYTHON: the standalone cluster restarted from that venv's Spark jars
  for s in spark-worker1 spark-worker2 spark-master; do $bin/python scripts/stack.py stop $s; done
  "$1" scripts/stack.py up --spark | grep -E "spark|error"
}

step "lint (ruff, mypy, promtool)"
$bin/ruff check src tests scripts || fail "ruff found problems"
$bin/mypy || fail "mypy found problems"
# the alert rules: Prometheus's own checker and their unit tests (make promtool fetches it)
[ -x $bin/promtool ] || fail "no $bin/promtool: run make promtool (Debian's prometheus package)"
$bin/promtool check rules deploy/prometheus/alerts.yml || fail "promtool check rules failed"
$bin/promtool check config deploy/prometheus/prometheus.yml > /dev/null \
  || fail "promtool check config failed (deploy/prometheus/prometheus.yml)"
(cd deploy/prometheus && "../../$bin/promtool" test rules alerts_test.yml) \
  || fail "promtool test rules failed"

step "unit tests (no network, no JVM)"
tests unit -q tests/unit
[ -z "$failed" ] || fail "unit tests failed; not starting the stack"

step "local stack"
if [ $mode != fast ]; then
  # the job's Python environment for --archives, rebuilt so it holds this checkout's code;
  # pip runs while the services start (they spend much of their start waiting)
  $bin/python scripts/yarn_pack.py > "$results/yarn-pack.log" 2>&1 &
  pack=$!
  make -s venv-spark35 > "$results/venv-spark35.log" 2>&1 &
  venv35=$!
fi
# the tests' class-data-sharing archive for Spark drivers (tests/integration/short_jvms.py),
# made once per Spark and JDK; else the first test session makes it while every worker waits
PYTHONPATH=scripts $bin/python -m tests.integration.short_jvms > "$results/cds.log" 2>&1 &
cds=$!
$bin/python scripts/stack.py fetch || fail "could not fetch the jars"
# A stack already running (a developer's) is reused and left running: every test uses its
# own topic and table prefix. Otherwise a fresh one is started, and stopped at the end.
# (status is read whole first: with pipefail, `status | grep -q` fails whenever grep exits
# before status has written its last line, and the stack would be wrongly "reused")
services=$($bin/python scripts/stack.py status) || fail "stack.py status failed"
if [ $mode = fast ]; then
  needed=$(grep -E '^(kafka|hbase|thrift) ' <<<"$services")
else
  needed=$(grep -vE '^(yarn|thrift-framed-compact) ' <<<"$services")
fi
if grep -q stopped <<<"$needed"; then
  started=1
  $bin/python scripts/stack.py up $([ $mode != fast ] && echo --spark) --wipe \
    || fail "the stack did not start"
else
  echo "reusing the running stack"
fi
if [ $mode != fast ]; then
  # the secured stack (KDC, Kerberized Kafka and HBase: test_kerberos.py) starts beside YARN
  $bin/python scripts/stack.py secure-up > "$results/secure-up.log" 2>&1 &
  secure=$!
  $bin/python scripts/stack.py up --yarn | grep -E "yarn|error" || fail "YARN did not start"
  wait $pack || { cat "$results/yarn-pack.log"; fail "could not pack the environment for YARN"; }
  cat "$results/yarn-pack.log"
  wait $secure || { cat "$results/secure-up.log"; fail "the secured stack did not start"; }
  grep -E "ready|error" "$results/secure-up.log"
fi

wait $cds; cat "$results/cds.log"  # without the archive the tests only run slower

# TEST_WORKERS: how many quiet integration tests run at once in the full run (on two cores
# three finished the tier in 1 000-1 070 s, against 1 290 s for two; with three the machine's
# CPU is 98-100 % busy, so a fourth would only stretch every test's waits)
workers=${TEST_WORKERS:-3}
if [ $mode = fast ]; then
  step "integration tests, two at a time (no faults, cluster, slow or serial tests)"
  tests fast -n 2 -m "integration and not faults and not cluster and not slow and not serial$deep" \
    "$@" tests/integration
else
  # The tests that restart Kafka or HBase go first, while the stack holds only a few topics
  # and tables: a broker killed with SIGKILL recovers every partition's log, a restarted
  # HBase reopens every region, and the other tests leave hundreds of each behind.
  step "integration tests that must run alone"
  tests serial -m "integration and serial$deep" "$@" tests/integration
  step "integration tests, $workers at a time (the cluster group on one worker)"
  tests parallel -n "$workers" --dist loadgroup -m "integration and not serial$deep" "$@" \
    tests/integration
  step "the integration core on pyspark 3.5: pipeline, driver kill, standalone, YARN, the UI's input reports"
  wait $venv35 || { cat "$results/venv-spark35.log"; fail "could not build .venv-spark35"; }
  spark_on .venv-spark35/bin/python || fail "the Spark 3.5 standalone cluster did not start"
  core=(tests/integration/test_pipeline.py::test_end_to_end_matches_the_oracle
        tests/integration/test_pipeline.py::test_driver_killed_after_session_writes_before_commit
        tests/integration/test_spark_submit.py
        tests/integration/test_observability.py::test_metrics_endpoint_and_batch_inputs_in_the_spark_ui)
  if [ $mode = all ]; then  # a restart, every way of stopping, and all of YARN's tests too
    core+=(tests/integration/test_pipeline.py::test_restart_after_some_batches_resumes_exactly
           tests/integration/test_stopping.py tests/integration/test_yarn.py)
  else
    core+=(tests/integration/test_yarn.py::test_client_mode_on_yarn_with_a_packed_venv)
  fi
  pytest=.venv-spark35/bin/pytest tests spark35 -n 2 --dist loadgroup -m integration "$@" \
    "${core[@]}"
  if [ "$started" = 0 ]; then  # a developer's stack: its standalone cluster back on this venv's Spark
    spark_on $bin/python > /dev/null || fail "could not restart Spark"
  fi
  if [ "$started" = 1 ]; then
    # the cluster stack in the plain one's place: three Kafka nodes, two HBase masters and
    # two region servers (it takes their ports); its faults, one test at a time
    step "multinode: a real cluster's faults (brokers, controller, coordinator, region server, master)"
    $bin/python scripts/stack.py down --wipe > /dev/null
    $bin/python scripts/stack.py up --cluster --spark --wipe || fail "the cluster stack did not start"
    LEAKPROOF_TEST_BOOTSTRAP=127.0.0.1:9092,127.0.0.2:9092,127.0.0.3:9092 \
      tests multinode -m "multinode$deep" "$@" tests/integration
  fi
fi

step "summary"
echo "make test ($mode): $((SECONDS - t0))s"
$bin/python - "$results" <<'PY'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for path in sorted(Path(sys.argv[1]).glob("*.xml")):
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    got = {k: int(suite.get(k, 0)) for k in total}
    print(f"  {path.stem:9s} {got['tests']} tests, {got['failures'] + got['errors']} failed, "
          f"{got['skipped']} skipped, {float(suite.get('time', 0)):.0f}s")
    total = {k: total[k] + got[k] for k in total}
bad = total["failures"] + total["errors"]
passed = total["tests"] - bad - total["skipped"]
print(f"tests: {passed} passed, {bad} failed, {total['skipped']} skipped")
PY
# the line above ("tests: N passed, N failed, N skipped") is the run's last line on success
[ -n "$failed" ] && fail "pytest failed in:$failed"
exit 0
