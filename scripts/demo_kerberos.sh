#!/usr/bin/env bash
# make run-kerberos: the job on the secured stack, start to result.
#  1. start the KDC, the Kerberized Kafka and HBase and the secured Thrift servers;
#  2. write a config that logs in from the job's keytab: Kafka over SASL_SSL/GSSAPI, HBase's
#     Thrift over SASL/GSSAPI at auth-conf (MODE=https: Thrift over HTTPS + SPNEGO);
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
$bin/python - "$cfg" "$name" "$MODE" <<'PY'
import json, sys, yaml
from pathlib import Path
path, name, mode = sys.argv[1:]
f = json.loads(Path(".services/secure/facts.json").read_text())
https = mode == "https"
hbase = {"host": "127.0.0.1", "table_prefix": name, "auth": "kerberos"}
if https:
    hbase.update(port=f["thrift_https_port"], transport="http", tls=True,
                 tls_ca_file=f["ca_file"], service_principal=f["thrift_http_principal"])
else:
    hbase.update(port=f["thrift_sasl_port"], sasl_qop="auth-conf",
                 service_principal=f["thrift_principal"])
data = {
    "kafka": {"bootstrap_servers": f["kafka_sasl_ssl"], "topic": name, "group_id": "demo",
              "consumer": {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI",
                           "sasl_kerberos_service_name": "kafka", "ssl_cafile": f["ca_file"]}},
    "hbase": hbase,
    "security": {"kerberos": {"principal": f["principal"], "keytab": f["keytab"],
                              "krb5_conf": f["krb5_conf"]}},
    "job": {"batch_interval_s": 2, "master": "local[2]"},
}
Path(path).write_text(yaml.safe_dump(data, sort_keys=False))
print(yaml.safe_dump(data, sort_keys=False))
PY
echo "== 3. topic, tables, events, the job (log: $dir/job.log)"
$bin/leakproof topic create --config "$cfg" --partitions 4
$bin/leakproof tables create --config "$cfg"
$bin/leakproof produce --config "$cfg" --events "$EVENTS" --sessions "$SESSIONS" --seed "$SEED"
$bin/leakproof run --config "$cfg" --until-idle 8 2> >(tee "$dir/job.log" | grep --line-buffered -E "leakproof\.(kerberos|stream)|ERROR" >&2)
echo "== 4. oracle"
$bin/leakproof verify --config "$cfg" --spec "$SEED:$EVENTS:$SESSIONS"
echo "(the secured stack is still running; stop everything with 'make stack-down')"
