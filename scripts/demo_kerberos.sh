#!/usr/bin/env bash
# make run-kerberos: the job on the secured stack, start to result.
#  1. start the KDC, the Kerberized Kafka and HBase and the secured Thrift servers;
#  2. write a config (stack.py secure-config) that logs in from the job's keytab: Kafka over
#     GSSAPI and HBase's Thrift over SASL at auth-conf (MODE=https: Kafka SASL_SSL, Thrift
#     over HTTPS + SPNEGO);
#  3. create a topic, produce EVENTS seeded events, run the job until idle;
#  4. print the oracle's verdict (exit 1 unless HBase matches it exactly).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
EVENTS=${EVENTS:-50000}
SESSIONS=${SESSIONS:-5000}
SEED=${SEED:-42}
MODE=${MODE:-sasl}
name="krbdemo$(date +%s)"
dir=.services/demo/$name
mkdir -p "$dir"
cfg=$dir/config.yml

echo "== 1. secured stack (KDC, Kafka with GSSAPI, Kerberized HBase + Thrift)"
$bin/python scripts/stack.py secure-up
echo "== 2. config $cfg (mode $MODE)"
$bin/python scripts/stack.py secure-config --name "$name" --mode "$MODE" > "$cfg"
cat "$cfg"
echo "== 3. topic, tables, events, the job (log: $dir/job.log)"
$bin/leakproof topic create --config "$cfg" --partitions 4
$bin/leakproof tables create --config "$cfg"
$bin/leakproof produce --config "$cfg" --events "$EVENTS" --sessions "$SESSIONS" --seed "$SEED"
$bin/leakproof run --config "$cfg" --until-idle 8 2> >(tee "$dir/job.log" | grep --line-buffered -E "leakproof\.(kerberos|stream)|ERROR" >&2)
echo "== 4. oracle"
$bin/leakproof verify --config "$cfg" --spec "$SEED:$EVENTS:$SESSIONS"
echo "(the secured stack is still running; stop everything with 'make stack-down')"
