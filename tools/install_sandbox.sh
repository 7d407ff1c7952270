#!/usr/bin/env bash
# Install bubblewrap (bwrap), the sandbox the assignment grader runs a student's code in
# (sapo_lab/course/isolation.py), and check that it can start one here: user, mount, PID and network
# namespaces. Needs root (or sudo) to install. Safe to run twice; fails loudly where no sandbox can start,
# since the grader would then fall back to its audit hook alone (its reports say so).
set -euo pipefail
if ! command -v bwrap > /dev/null; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y --no-install-recommends bubblewrap \
        || { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends bubblewrap; }
fi
bwrap --version
bwrap --unshare-all --unshare-user --die-with-parent --ro-bind / / true
echo "bubblewrap starts a sandbox here"
