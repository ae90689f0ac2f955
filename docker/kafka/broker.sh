#!/usr/bin/env bash
# A throw-away Apache Kafka 4.x broker (KRaft) as a plain java process on 127.0.0.1, from
# jars that Maven resolves from Maven Central. No Docker needed. One node by default; with
# KAFKA_NODES=3 a local cluster of three.
#
#   docker/kafka/broker.sh fetch          resolve the jars into .kafka/lib
#   docker/kafka/broker.sh start          fetch if needed, format storage once, start every node
#                                         not running, wait until the broker (cluster) serves
#   docker/kafka/broker.sh stop           controlled shutdown (SIGTERM) of every node, SIGKILL after 30 s
#   docker/kafka/broker.sh status         exit 0 while every node runs (a cluster: one line per node)
#   docker/kafka/broker.sh reset          stop and delete the data
#   docker/kafka/broker.sh kill-node N    SIGKILL node N (1..KAFKA_NODES); its data stays
#   docker/kafka/broker.sh start-node N   start node N again on its data, wait until it serves
#
# One node (KAFKA_NODES unset or 1): node id 1, clients on KAFKA_PORT, controller on
# KAFKA_CONTROLLER_PORT, data in KAFKA_HOME_DIR/run-KAFKA_PORT, replication factor 1.
#
# A cluster (KAFKA_NODES=N, N >= 2): N nodes in combined broker+controller mode, node ids 1..N,
# one cluster id, a static quorum of all N controllers. Node i serves clients on
# KAFKA_PORT+i-1 and its controller on KAFKA_CONTROLLER_PORT+i-1; in cluster mode the
# controller ports default to KAFKA_PORT+100.. (19192..19194 for the default 19092), so they
# never meet the client ports (a range that does is refused). Default replication factor
# min(N, 3) for every topic (internal ones included) and min.insync.replicas 2 from three
# nodes on (1 below). Node i lives in KAFKA_HOME_DIR/cluster-KAFKA_PORT/node-i (data, conf,
# logs, pid file). `start` waits for a replicated round trip: a topic with the cluster's
# replication factor, every replica in sync, produce with acks=all, a group consume.
#
# Environment: KAFKA_NODES (1), KAFKA_PORT (19092), KAFKA_CONTROLLER_PORT (19093; cluster:
# KAFKA_PORT+100), KAFKA_PARTITIONS (4), KAFKA_HOME_DIR (.kafka), KAFKA_LIB_DIR
# (KAFKA_HOME_DIR/lib: jars may be shared between homes), KAFKA_HEAP_OPTS (-Xms256m -Xmx768m;
# cluster: -Xms128m -Xmx384m per node), KAFKA_START_TIMEOUT (120), PYTHON (the project's
# .venv/bin/python when there is one, else python3; needs aiokafka for the readiness probe).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
ROOT="${KAFKA_HOME_DIR:-$REPO/.kafka}"
LIB="${KAFKA_LIB_DIR:-$ROOT/lib}"
NODES="${KAFKA_NODES:-1}"
PORT="${KAFKA_PORT:-19092}"
PARTITIONS="${KAFKA_PARTITIONS:-4}"
JVM_OPTS="-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if [ -z "${PYTHON:-}" ] && [ -x "$REPO/.venv/bin/python" ]; then
  PYTHON="$REPO/.venv/bin/python" # (the system's python3 rarely has aiokafka)
fi
PYTHON="${PYTHON:-python3}"

case "$NODES" in
  '' | *[!0-9]* | 0*) echo "broker.sh: KAFKA_NODES must be a positive integer, not '$NODES'" >&2; exit 2 ;;
esac
if [ "$NODES" -eq 1 ]; then
  CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
  HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}"
  REPLICATION=1
  MIN_ISR=1
  CLUSTER="$ROOT/run-$PORT"
else
  CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 100))}"
  HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx384m}"
  REPLICATION=$((NODES < 3 ? NODES : 3))
  MIN_ISR=$((NODES < 3 ? 1 : 2))
  CLUSTER="$ROOT/cluster-$PORT"
  if [ "$CONTROLLER_PORT" -le $((PORT + NODES - 1)) ] && [ "$PORT" -le $((CONTROLLER_PORT + NODES - 1)) ]; then
    echo "broker.sh: client ports $PORT..$((PORT + NODES - 1)) and controller ports" \
      "$CONTROLLER_PORT..$((CONTROLLER_PORT + NODES - 1)) overlap (set KAFKA_CONTROLLER_PORT)" >&2
    exit 2
  fi
fi

VOTERS=""
BOOTSTRAP=""
for ((i = 1; i <= NODES; i++)); do
  VOTERS="${VOTERS:+$VOTERS,}$i@127.0.0.1:$((CONTROLLER_PORT + i - 1))"
  BOOTSTRAP="${BOOTSTRAP:+$BOOTSTRAP,}127.0.0.1:$((PORT + i - 1))"
done

# node N: its number, ports and directories as globals (one node: KAFKA_HOME_DIR/run-PORT itself)
node() {
  NODE="$1"
  NODE_PORT=$((PORT + NODE - 1))
  NODE_CONTROLLER_PORT=$((CONTROLLER_PORT + NODE - 1))
  if [ "$NODES" -eq 1 ]; then RUN="$CLUSTER"; else RUN="$CLUSTER/node-$NODE"; fi
  DATA="$RUN/data"
  CONF="$RUN/conf"
  LOGS="$RUN/logs"
  PIDFILE="$RUN/kafka.pid"
}

node_arg() {  # node_arg N: check N, select the node
  case "${1:-}" in
    '' | *[!0-9]* | 0*) echo "broker.sh: a node number 1..$NODES is needed, not '${1:-}'" >&2; exit 2 ;;
  esac
  if [ "$1" -gt "$NODES" ]; then echo "broker.sh: no node $1 (KAFKA_NODES=$NODES)" >&2; exit 2; fi
  node "$1"
}

fetch() {
  mkdir -p "$LIB"
  # maven prints colour resets even in batch mode; logs get plain text
  if ! mvn -B -q -Dstyle.color=never -f "$HERE/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$LIB" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g'; then
    echo "broker.sh: fetching the Kafka jars from Maven Central failed" >&2
    exit 1
  fi
  compgen -G "$LIB/kafka_2.13-*.jar" >/dev/null || { echo "broker.sh: no kafka_2.13 jar in $LIB" >&2; exit 1; }
  compgen -G "$LIB/log4j-slf4j-impl-*.jar" >/dev/null || { echo "broker.sh: no SLF4J binding in $LIB" >&2; exit 1; }
}

render_config() {
  mkdir -p "$DATA" "$CONF" "$LOGS"
  sed -e "s|@NODE_ID@|$NODE|g" -e "s|@VOTERS@|$VOTERS|g" \
      -e "s|@BROKER_PORT@|$NODE_PORT|g" -e "s|@CONTROLLER_PORT@|$NODE_CONTROLLER_PORT|g" \
      -e "s|@DATA_DIR@|$DATA|g" -e "s|@PARTITIONS@|$PARTITIONS|g" \
      -e "s|@REPLICATION@|$REPLICATION|g" -e "s|@MIN_ISR@|$MIN_ISR|g" \
      "$HERE/server.properties.in" > "$CONF/server.properties"
  cp "$HERE/log4j2.properties" "$CONF/log4j2.properties"
}

java_cmd() {  # java_cmd HEAP MAIN [ARGS...] -> global array CMD
  local heap="$1"; shift
  local -a heap_a jvm_a
  read -r -a heap_a <<<"$heap"
  read -r -a jvm_a <<<"$JVM_OPTS"
  CMD=("$JAVA" "${heap_a[@]}" "${jvm_a[@]}" "-Dlog4j2.configurationFile=$CONF/log4j2.properties"
       "-Dkafka.logs.dir=$LOGS" -cp "$LIB/*" "$@")
}

new_cluster_id() {
  # a random id as Kafka's own, which never starts with "-" (the tool would read it as an option)
  "$PYTHON" -c 'import base64,uuid
ids = (base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=") for _ in iter(int, 1))
print(next(i for i in ids if not i.startswith("-")))'
}

cluster_id() {  # one node: a new id per format; a cluster: one id for all its nodes, kept
  if [ "$NODES" -eq 1 ]; then new_cluster_id; return; fi
  if [ ! -s "$CLUSTER/cluster.id" ]; then
    mkdir -p "$CLUSTER"
    new_cluster_id > "$CLUSTER/cluster.id"
  fi
  cat "$CLUSTER/cluster.id"
}

format_storage() {
  [ -f "$DATA/meta.properties" ] && return 0
  local id
  id="$(cluster_id)"
  java_cmd "-Xmx256m" kafka.tools.StorageTool format --cluster-id "$id" --config "$CONF/server.properties"
  "${CMD[@]}" > "$LOGS/format.out" 2>&1 || { cat "$LOGS/format.out" >&2; exit 1; }
}

launch() {  # start the selected node's JVM (storage formatted), without waiting
  java_cmd "$HEAP_OPTS" kafka.Kafka "$CONF/server.properties"
  nohup "${CMD[@]}" > "$LOGS/kafka.out" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
}

alive() { kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]; }

is_running() { [ -f "$PIDFILE" ] && alive "$(cat "$PIDFILE")"; }

wait_started() {  # the selected node's log says it started
  local pid deadline what="kafka"
  [ "$NODES" -eq 1 ] || what="kafka node $NODE"
  pid="$(cat "$PIDFILE")"
  deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120}))
  until grep -q "Kafka Server started" "$LOGS/kafka.out" 2>/dev/null; do
    if ! alive "$pid"; then
      echo "broker.sh: $what exited during startup:" >&2; tail -n 40 "$LOGS/kafka.out" >&2; return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "broker.sh: $what did not start in time:" >&2; tail -n 40 "$LOGS/kafka.out" >&2; return 1
    fi
    sleep 0.5
  done
}

probe() {  # probe BOOTSTRAP BROKERS: wait_ready.py with the cluster's replication
  KAFKA_BOOTSTRAP="$1" KAFKA_WAIT_BROKERS="$2" KAFKA_REPLICATION="$REPLICATION" "$PYTHON" "$HERE/wait_ready.py"
}

start() {
  compgen -G "$LIB/kafka_2.13-*.jar" >/dev/null || fetch
  if [ "$NODES" -eq 1 ]; then
    node 1
    if is_running; then echo "kafka already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"; return 0; fi
    render_config
    format_storage
    launch
    wait_started
    probe "127.0.0.1:$PORT" 1
    echo "kafka ready on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), log $LOGS/kafka.out)"
    return 0
  fi
  local i started=()
  for ((i = 1; i <= NODES; i++)); do
    node "$i"
    if is_running; then continue; fi
    render_config
    format_storage
    launch
    started+=("$i")
  done
  for i in "${started[@]}"; do node "$i"; wait_started; done
  probe "$BOOTSTRAP" "$NODES"
  echo "kafka cluster of $NODES ready on $BOOTSTRAP (replication factor $REPLICATION," \
    "min.insync.replicas $MIN_ISR, nodes in $CLUSTER)"
}

start_node() {
  node_arg "$1"
  if is_running; then echo "kafka node $NODE already running on 127.0.0.1:$NODE_PORT (pid $(cat "$PIDFILE"))"; return 0; fi
  compgen -G "$LIB/kafka_2.13-*.jar" >/dev/null || fetch
  render_config
  format_storage
  launch
  wait_started
  probe "127.0.0.1:$NODE_PORT" 1
  echo "kafka node $NODE ready on 127.0.0.1:$NODE_PORT (pid $(cat "$PIDFILE"), log $LOGS/kafka.out)"
}

kill_node() {
  node_arg "$1"
  if is_running; then
    local pid
    pid="$(cat "$PIDFILE")"
    kill -KILL "$pid"
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    echo "kafka node $NODE killed (pid $pid)"
  fi
  rm -f "$PIDFILE"
}

stop() {  # every node at once: a node's controlled shutdown needs a controller quorum
  local i pid pids=() pidfiles=()
  for ((i = 1; i <= NODES; i++)); do
    node "$i"
    [ -f "$PIDFILE" ] || continue
    pidfiles+=("$PIDFILE")
    pid="$(cat "$PIDFILE")"
    if alive "$pid"; then kill -TERM "$pid"; pids+=("$pid"); fi
  done
  for _ in $(seq 1 60); do
    for i in "${!pids[@]}"; do alive "${pids[$i]}" || unset 'pids[i]'; done
    [ "${#pids[@]}" -eq 0 ] && break
    sleep 0.5
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -f "${pidfiles[@]}"
}

status() {
  if [ "$NODES" -eq 1 ]; then
    node 1
    if is_running; then
      echo "running, pid $(cat "$PIDFILE"), 127.0.0.1:$NODE_PORT"
      return 0
    fi
    echo "stopped, 127.0.0.1:$NODE_PORT"
    return 1
  fi
  local i all=0
  for ((i = 1; i <= NODES; i++)); do
    node "$i"
    if is_running; then
      echo "node $i: running, pid $(cat "$PIDFILE"), 127.0.0.1:$NODE_PORT (controller $NODE_CONTROLLER_PORT)"
    else
      echo "node $i: stopped, 127.0.0.1:$NODE_PORT (controller $NODE_CONTROLLER_PORT)"
      all=1
    fi
  done
  return "$all"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  reset) stop; rm -rf "$CLUSTER" ;;
  kill-node) kill_node "${2:-}" ;;
  start-node) start_node "${2:-}" ;;
  *) echo "usage: $0 {fetch|start|stop|status|reset|kill-node N|start-node N}" >&2; exit 2 ;;
esac
