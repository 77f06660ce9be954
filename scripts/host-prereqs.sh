#!/usr/bin/env bash
# Make this machine able to run the local test cluster: Docker engine, debootstrap,
# OpenSSH client. Installs only what is missing (Debian/Ubuntu, root) and starts dockerd
# when no engine answers. Safe to run again.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "host-prereqs: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "host-prereqs: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "host-prereqs: no Docker engine answers and this user cannot start one" >&2
    exit 1
  fi
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    systemctl start docker
  else
    # No systemd on this machine (a CI container): start the engine in the background.
    mkdir -p /var/log
    nohup dockerd >/var/log/gpucluster-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "host-prereqs: dockerd did not start; see /var/log/gpucluster-dockerd.log" >&2; exit 1; }
fi
echo "host-prereqs: Docker $(docker version --format '{{.Server.Version}}') ready"
