#!/bin/sh
# Stand-in for a vendor's setup script: records each run and prints the vendor-style success
# line the role checks (nccl_net_plugin_setup_success).
set -eu
echo "$(date -u +%FT%TZ) $*" >> /var/log/gpucluster-stack-setup.log
echo "preparing the user-space stack for $(ls ./*.so | head -n 1)"
echo "stack setup: SUCCESS"
