#!/usr/bin/env bash
# Start or stop the services the integration tests need: a real Kafka broker (from Maven
# Central jars, docker/kafka/broker.sh), a real Redis server (Debian's redis-server), and
# Debian's chromium for the dashboard tests (installed, not started: each test starts its own).
#
#   docker/services.sh up [SERVICE...]
#                             install what is missing, start what is not running yet;
#                             remember what was started. SERVICE: kafka, redis, chromium
#                             (default: all three; the stream and gateway benches need kafka only)
#   docker/services.sh down   stop only what `up` started
#   docker/services.sh env    print the variables the tests read
#
# Ports: LOOPWATCH_TEST_KAFKA_PORT (19092), LOOPWATCH_TEST_REDIS_PORT (16379).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
STATE="$REPO/.services"
KAFKA_PORT="${LOOPWATCH_TEST_KAFKA_PORT:-19092}"
REDIS_PORT="${LOOPWATCH_TEST_REDIS_PORT:-16379}"
export KAFKA_PORT KAFKA_CONTROLLER_PORT="$((KAFKA_PORT + 1))"
export PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
mkdir -p "$STATE"

# debian_install COMMAND PACKAGE: install Debian's PACKAGE unless COMMAND is on the PATH
debian_install() {
  if command -v "$1" >/dev/null 2>&1; then return 0; fi
  echo "services: installing Debian's $2" >&2
  if [ "$(id -u)" != 0 ]; then
    echo "services: $1 is missing and this user cannot install it (apt-get install $2)" >&2
    return 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >"$STATE/apt.log" 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2") >"$STATE/apt.log" 2>&1 \
      || { echo "services: apt-get install $2 failed (see $STATE/apt.log)" >&2; return 1; }
  fi
}

redis_up() {
  if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then return 0; fi
  debian_install redis-server redis-server
  mkdir -p "$STATE/redis"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --dir "$STATE/redis" --pidfile "$STATE/redis/redis.pid" --logfile "$STATE/redis/redis.log"
  for _ in $(seq 1 50); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && { echo redis >> "$STATE/started"; return 0; }
    sleep 0.1
  done
  echo "services: redis-server did not answer on port $REDIS_PORT" >&2
  return 1
}

# disk_check: say so up front when the disk is nearly full. Kafka takes its log directory
# offline when a write fails for space, and every test that needs the broker then errors.
disk_check() {
  local free_mib
  free_mib="$(df -Pm "$REPO" | awk 'NR == 2 {print $4}')"
  if [ -n "$free_mib" ] && [ "$free_mib" -lt "${LOOPWATCH_MIN_FREE_MIB:-2048}" ]; then
    echo "services: only ${free_mib} MiB free on the disk of $REPO (want ${LOOPWATCH_MIN_FREE_MIB:-2048});" \
      "the broker stops when its disk fills and the integration tests then fail" >&2
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

kafka_up() {
  if "$HERE/kafka/broker.sh" status >/dev/null; then return 0; fi
  if port_open "$KAFKA_PORT"; then
    echo "services: something already serves 127.0.0.1:$KAFKA_PORT; using it as the broker" >&2
    return 0
  fi
  "$HERE/kafka/broker.sh" start
  echo kafka >> "$STATE/started"
}

down() {
  [ -f "$STATE/started" ] || return 0
  if grep -qx redis "$STATE/started"; then
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  fi
  if grep -qx kafka "$STATE/started"; then
    "$HERE/kafka/broker.sh" stop || true
  fi
  rm -f "$STATE/started"
}

case "${1:-}" in
  up)
    shift
    disk_check
    for service in "${@:-redis chromium kafka}"; do
      for name in $service; do
        case "$name" in
          redis) redis_up ;;
          chromium) debian_install chromium chromium ;;
          kafka) kafka_up ;;
          *) echo "services: unknown service '$name' (kafka, redis, chromium)" >&2; exit 2 ;;
        esac
      done
    done
    ;;
  down) down ;;
  env) echo "LOOPWATCH_TEST_KAFKA=127.0.0.1:$KAFKA_PORT LOOPWATCH_TEST_REDIS=redis://127.0.0.1:$REDIS_PORT/0" ;;
  *) echo "usage: $0 {up [kafka|redis|chromium]...|down|env}" >&2; exit 2 ;;
esac
