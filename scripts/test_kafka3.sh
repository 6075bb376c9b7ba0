#!/usr/bin/env bash
# make test-kafka3: the Kafka-facing integration tests against a Kafka 3.9 broker (the line
# most YARN + HBase clusters run) in place of the stack's 4.x one, on the running stack; the
# 4.x broker is put back afterwards, whatever the tests did. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
restore() { $bin/python scripts/stack.py stop kafka3; $bin/python scripts/stack.py start kafka; }
$bin/python scripts/stack.py stop kafka || exit 1
trap restore EXIT
$bin/python scripts/stack.py start kafka3 || exit 1
$bin/pytest -p no:cacheprovider -n 2 --dist loadgroup \
  -m "integration and not serial and not cluster" "$@" \
  tests/integration/test_stack.py tests/integration/test_transactions.py \
  tests/integration/test_start_positions.py tests/integration/test_topic_changes.py \
  tests/integration/test_commit_stores.py tests/integration/test_rewind.py \
  tests/integration/test_pipeline.py tests/integration/test_bad_input.py \
  tests/integration/test_closed_output.py \
  "tests/integration/test_group_mirror.py::test_a_member_in_the_mirror_group_never_fails_a_batch[classic]"
rc=$?
[ $rc -eq 5 ] && { echo "pytest collected no tests" >&2; exit 1; }
exit $rc
