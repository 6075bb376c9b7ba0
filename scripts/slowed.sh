#!/usr/bin/env bash
# scripts/slowed.sh FACTOR COMMAND...: COMMAND on a machine FACTOR times slower, the running
# local stack's services slowed with it.
#
# A CPU cgroup caps COMMAND, its children and the stack's processes (Kafka, HBase, Thrift,
# the registry, Spark) at 1/FACTOR of this machine's cores together: a day when the machine
# runs 3x slower, made on purpose, to show that every test waits for a condition and none
# for the clock. Needs root and the cgroup file system (v1's cpu controller or v2's
# cpu.max). When COMMAND ends, its exit code is this script's and every process left in the
# cgroup goes back to the root one, so the stack runs at full speed again.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/slowed.sh FACTOR COMMAND..." >&2; exit 2; }
factor=$1; shift
[[ $factor =~ ^[0-9]+([.][0-9]+)?$ ]] && awk "BEGIN{exit !($factor >= 1)}" \
  || { echo "scripts/slowed.sh: FACTOR must be a number >= 1, got '$factor'" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "scripts/slowed.sh: needs root (it makes a cgroup)" >&2; exit 2; }

period=100000
quota=$(awk "BEGIN{printf \"%d\", $(nproc) * $period / $factor}")
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # cgroup v2
  root=/sys/fs/cgroup
  grep -qw cpu $root/cgroup.subtree_control || echo +cpu > $root/cgroup.subtree_control
  group=$root/leakproof-slowed
  mkdir -p $group && echo "$quota $period" > $group/cpu.max
elif [ -d /sys/fs/cgroup/cpu ]; then  # cgroup v1
  root=/sys/fs/cgroup/cpu
  group=$root/leakproof-slowed
  mkdir -p $group && echo $period > $group/cpu.cfs_period_us && echo "$quota" > $group/cpu.cfs_quota_us
else
  echo "scripts/slowed.sh: no CPU cgroup controller under /sys/fs/cgroup" >&2; exit 2
fi

release() {  # every process still in the group back to the root group
  local pid
  while read -r pid; do echo "$pid" > $root/cgroup.procs 2>/dev/null; done < $group/cgroup.procs
}
trap release EXIT
# the stack's services: every process started from this checkout's .services, and the
# Spark master (whose command line names only the venv's jars)
for pid in $(pgrep -f "$PWD/.services|org.apache.spark.deploy.master.Master"); do
  echo "$pid" > $group/cgroup.procs 2>/dev/null
done
echo "slowed ${factor}x: $(wc -l < $group/cgroup.procs) stack processes and the command" \
     "share $quota/$period of a CPU" >&2
bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' _ "$group" "$@"
