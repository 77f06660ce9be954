#!/usr/bin/env bash
# One-shot bootstrap of a gpucluster controller and cluster.
#
#   scripts/bootstrap.sh                       # the local 3-node test cluster (sandbox)
#   scripts/bootstrap.sh --nodes 2             # ... with 2 nodes
#   scripts/bootstrap.sh --hosts h1,h2 --user U --image REF [--key K] [--name prod]
#                                              # real hosts: SSH trust, inventory, converge
#
# Steps: .venv with the pinned dependencies; then either (a) sandbox up, or (b) a check of
# every host over SSH (fabric/paramiko), the controller key installed (a password is asked
# once if the key is not yet trusted) and inventory/<name>/hosts.yml written from facts
# gathered on the hosts (group_vars/ from inventory/sample when it has none, with
# training_image_ref = --image); then site.yml and playbooks/validate.yml. Re-running is
# safe: every step converges to the same state.
set -euo pipefail
cd "$(dirname "$0")/.."

hosts="" user="" key="" name="cluster" nodes=3 validate=1 image=""
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --user) user="$2"; shift 2 ;;
    --key) key="$2"; shift 2 ;;
    --image) image="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --no-validate) validate=0; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bootstrap: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$hosts" ]; then
  scripts/host-prereqs.sh
fi
scripts/venv.sh
export PATH="$PWD/.venv/bin:$PATH"

if [ -z "$hosts" ]; then
  inventory=inventory/sandbox/hosts.yml
  gpucluster sandbox up --nodes "$nodes"
else
  [ -n "$user" ] || { echo "bootstrap: --hosts needs --user" >&2; exit 2; }
  inventory="inventory/$name/hosts.yml"
  args=(hosts init --hosts "$hosts" --user "$user" --inventory-dir "inventory/$name")
  [ -n "$key" ] && args+=(--key "$key")
  [ -n "$image" ] && args+=(--image "$image")
  gpucluster "${args[@]}"
  # The sample's example image cannot be pulled: stop before converging with it.
  if grep -qs '^training_image_ref: registry.example.com/' "inventory/$name/group_vars/all/training_image.yml"; then
    echo "bootstrap: set training_image_ref in inventory/$name/group_vars/all/training_image.yml" \
         "(or rerun with --image REF), then rerun" >&2
    exit 2
  fi
fi

ansible-playbook -i "$inventory" site.yml
if [ "$validate" = 1 ]; then
  ansible-playbook -i "$inventory" playbooks/validate.yml
fi
