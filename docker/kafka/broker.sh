#!/usr/bin/env bash
# A throw-away single-node Apache Kafka 4.x broker (KRaft) as a plain java process on
# 127.0.0.1, from jars that Maven resolves from Maven Central. No Docker needed.
#
#   docker/kafka/broker.sh fetch    resolve the jars into .kafka/lib
#   docker/kafka/broker.sh start    fetch if needed, format storage once, start, wait until it serves
#   docker/kafka/broker.sh stop     controlled shutdown (SIGTERM), SIGKILL after 30 s
#   docker/kafka/broker.sh status   exit 0 while the broker runs
#   docker/kafka/broker.sh reset    stop and delete its data
#
# Environment: KAFKA_PORT (19092), KAFKA_CONTROLLER_PORT (19093), KAFKA_PARTITIONS (4),
# KAFKA_HOME_DIR (.kafka), KAFKA_HEAP_OPTS (-Xms256m -Xmx768m), KAFKA_START_TIMEOUT (120),
# PYTHON (python3, needs aiokafka for the readiness probe).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
ROOT="${KAFKA_HOME_DIR:-$REPO/.kafka}"
LIB="$ROOT/lib"
PORT="${KAFKA_PORT:-19092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
PARTITIONS="${KAFKA_PARTITIONS:-4}"
RUN="$ROOT/run-$PORT"
DATA="$RUN/data"
CONF="$RUN/conf"
LOGS="$RUN/logs"
PIDFILE="$RUN/kafka.pid"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}"
JVM_OPTS="-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
PYTHON="${PYTHON:-python3}"

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
  sed -e "s|@BROKER_PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
      -e "s|@DATA_DIR@|$DATA|g" -e "s|@PARTITIONS@|$PARTITIONS|g" \
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

format_storage() {
  [ -f "$DATA/meta.properties" ] && return 0
  local cluster_id
  # a random id as Kafka's own, which never starts with "-" (the tool would read it as an option)
  cluster_id="$("$PYTHON" -c 'import base64,uuid
ids = (base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=") for _ in iter(int, 1))
print(next(i for i in ids if not i.startswith("-")))')"
  java_cmd "-Xmx256m" kafka.tools.StorageTool format --cluster-id "$cluster_id" --config "$CONF/server.properties"
  "${CMD[@]}" > "$LOGS/format.out" 2>&1 || { cat "$LOGS/format.out" >&2; exit 1; }
}

is_running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

wait_ready() {
  local pid deadline
  pid="$(cat "$PIDFILE")"
  deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120}))
  until grep -q "Kafka Server started" "$LOGS/kafka.out" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "broker.sh: kafka exited during startup:" >&2; tail -n 40 "$LOGS/kafka.out" >&2; return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "broker.sh: kafka did not start in time:" >&2; tail -n 40 "$LOGS/kafka.out" >&2; return 1
    fi
    sleep 0.5
  done
  KAFKA_BOOTSTRAP="127.0.0.1:$PORT" "$PYTHON" "$HERE/wait_ready.py"
}

start() {
  if is_running; then echo "kafka already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"; return 0; fi
  compgen -G "$LIB/kafka_2.13-*.jar" >/dev/null || fetch
  render_config
  format_storage
  java_cmd "$HEAP_OPTS" kafka.Kafka "$CONF/server.properties"
  nohup "${CMD[@]}" > "$LOGS/kafka.out" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
  wait_ready
  echo "kafka ready on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), log $LOGS/kafka.out)"
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$PIDFILE"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) is_running ;;
  reset) stop; rm -rf "$RUN" ;;
  *) echo "usage: $0 {fetch|start|stop|status|reset}" >&2; exit 2 ;;
esac
