#!/usr/bin/env bash
# make run: the whole job on the local stack, start to result.
#  1. start Kafka and HBase (+ Thrift) if they are not running;
#  2. create a fresh topic (4 partitions) and tables under a fresh prefix;
#  3. produce EVENTS seeded web events (default 200000) in SESSIONS sessions;
#  4. run the DStream job until it has been idle for a few seconds;
#  5. print a summary, a few sessions, the offsets rows through the real HBase shell,
#     and the oracle's verdict (exit 1 unless HBase matches it exactly).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
EVENTS=${EVENTS:-200000}
SESSIONS=${SESSIONS:-20000}
SEED=${SEED:-42}
name="demo$(date +%s)"
dir=.services/demo/$name
mkdir -p "$dir"
cfg=$dir/config.yml
sed -e "s/^  topic: web-events/  topic: $name/" -e "s/^  table_prefix: null/  table_prefix: $name/" \
  config.yml > "$cfg"

echo "== 1. local stack"
$bin/python scripts/stack.py up
echo "== 2. topic $name (4 partitions), tables ${name}_*"
$bin/leakproof topic create --config "$cfg" --partitions 4
$bin/leakproof tables create --config "$cfg"
echo "== 3. produce"
$bin/leakproof produce --config "$cfg" --events "$EVENTS" --sessions "$SESSIONS" --seed "$SEED"
echo "== 4. run the job until idle (log: $dir/job.log)"
start=$SECONDS
$bin/leakproof run --config "$cfg" --until-idle 8 2> >(tee "$dir/job.log" | grep --line-buffered -E "leakproof\.|ERROR" >&2)
took=$((SECONDS - start))
echo "== 5. result"
$bin/python - "$cfg" "$EVENTS" "$took" <<'PY'
import sys
import happybase
from leakproof.core import config
cfg = config.load(sys.argv[1])
events, took = int(sys.argv[2]), float(sys.argv[3])
conn = happybase.Connection(cfg.hbase.host, cfg.hbase.port, table_prefix=cfg.hbase.table_prefix)
rows = list(conn.table(cfg.hbase.sessions_table).scan(columns=[b"s"]))
closed = sum(1 for _, r in rows if r.get(b"s:state") == b"closed")
applied = sum(int(r[b"s:events"]) for _, r in rows)
late = sum(int(r.get(b"s:late_events", b"0")) for _, r in rows)
print(f"events produced {events}, sessions in HBase {len(rows)} ({closed} closed), "
      f"events folded {applied}, late {late}")
print(f"job wall time {took:.1f}s including Spark start-up and the idle wait: "
      f"{events / took:.0f} events/s end to end")
print("a few sessions:")
for key, r in sorted(rows, key=lambda kv: -int(kv[1][b's:events']))[:3]:
    fields = {k.decode()[2:]: v.decode() for k, v in sorted(r.items())}
    print(f"  {key.decode()}: {fields}")
PY
echo "-- offsets rows, newest first, through the HBase shell:"
echo "scan '${name}_stream_kafka_offsets', {REVERSED => true, COLUMNS => ['offsets'], LIMIT => 3}" \
  | scripts/hbase-shell 2>/dev/null | grep -E "column=|row\(s\)"
echo "== oracle"
$bin/leakproof verify --config "$cfg" --spec "$SEED:$EVENTS:$SESSIONS"
echo "(the stack is still running: inspect with 'make shell', stop with 'make stack-down')"
