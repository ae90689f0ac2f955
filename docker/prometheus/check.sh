#!/usr/bin/env bash
# Check docker/prometheus/alerts.yml with promtool: `promtool check rules` and its unit tests
# (alerts.test.yml). promtool comes from the PATH, else from Debian's prometheus package,
# downloaded (not installed: no server is started) and unpacked into .tools/.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TOOLS="$REPO/.tools/prometheus"

promtool_path() {
  if command -v promtool >/dev/null 2>&1; then command -v promtool; return; fi
  local found
  found="$(find "$TOOLS" -name promtool -type f 2>/dev/null | head -1)"
  if [ -n "$found" ]; then echo "$found"; return; fi
  mkdir -p "$TOOLS"
  (
    cd "$TOOLS"
    if ! apt-get download prometheus >/dev/null 2>&1; then
      [ "$(id -u)" = 0 ] || { echo "check-alerts: cannot download Debian's prometheus package" >&2; exit 1; }
      apt-get update -qq >/dev/null 2>&1
      apt-get download prometheus >/dev/null
    fi
    dpkg -x prometheus_*.deb unpacked
    rm -f prometheus_*.deb
  )
  find "$TOOLS" -name promtool -type f | head -1
}

PROMTOOL="$(promtool_path)"
[ -x "$PROMTOOL" ] || { echo "check-alerts: no promtool" >&2; exit 1; }
cd "$HERE"
"$PROMTOOL" check rules alerts.yml
"$PROMTOOL" test rules alerts.test.yml
"$PROMTOOL" check config --syntax-only prometheus.yml
