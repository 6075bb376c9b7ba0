#!/usr/bin/env bash
# Container entry point: render the site file for /data, start the master (with its
# regionserver and ZooKeeper), then the Thrift1 server on all container interfaces.
set -euo pipefail
run=/opt/leakproof/.services/hbase
mkdir -p "$run/conf" "$run/logs" /data/tmp
sed -e "s#@ROOT@/root#/data/root#; s#@ROOT@/tmp#/data/tmp#; s#@ROOT@/zk#/data/zk#; s#@ZK_PORT@#2181#" \
  /opt/leakproof/services/hbase/hbase-site.xml > "$run/conf/hbase-site.xml"
cp /opt/leakproof/services/hbase/log4j2.properties "$run/conf/"
opens="--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true"
cp_="$run/conf:$run/lib/*"
log="-Dlog4j2.configurationFile=file:$run/conf/log4j2.properties"
# shellcheck disable=SC2086
java -Xmx3g $opens $log -cp "$cp_" org.apache.hadoop.hbase.master.HMaster start &
until bash -c '</dev/tcp/127.0.0.1/2181' 2>/dev/null; do sleep 1; done
# shellcheck disable=SC2086
exec java -Xmx512m $opens $log -cp "$cp_" org.apache.hadoop.hbase.thrift.ThriftServer -b 0.0.0.0 -p 9090 start
