#!/usr/bin/env bash
# Start (or stop) what the test-suite needs beyond Python: a Docker engine.
# dockerd runs with --iptables=false --bridge=none so it leaves the host firewall alone;
# sandboxes use --network none.
set -euo pipefail
cmd=${1:-start}
pidfile=/tmp/comprl-gym-dockerd.pid
need_apt=()
command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
# Debian's registry (distribution 2.8): the SWE-bench image-pull tests serve one on 127.0.0.1.
command -v docker-registry >/dev/null || need_apt+=(docker-registry)
command -v chromium >/dev/null || need_apt+=(chromium)
if [ "$cmd" = start ]; then
  if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >/dev/null
    else
      echo "services.sh: please install ${need_apt[*]} (needs root)" >&2
    fi
  fi
  if docker info >/dev/null 2>&1; then
    echo "services.sh: a Docker engine already answers"
    exit 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "services.sh: no Docker engine and not root: Docker tests will use bubblewrap only" >&2
    exit 0
  fi
  nohup dockerd --iptables=false --bridge=none --host=unix:///var/run/docker.sock \
    >/tmp/comprl-gym-dockerd.log 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { echo "services.sh: dockerd is up"; exit 0; }
    sleep 1
  done
  echo "services.sh: dockerd did not start; see /tmp/comprl-gym-dockerd.log" >&2
  exit 1
elif [ "$cmd" = stop ]; then
  if [ -f "$pidfile" ]; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  fi
fi
