#!/usr/bin/env bash
# Build framework_audit/.venv-easyr1: the shared torch base (framework_audit/.venv-torch, read through a .pth
# file), requirements-easyr1.txt, and EasyR1 installed with --no-deps from the commit pinned in
# framework_audit/frameworks.py. EasyR1 is not on a package index and its package is named `verl`, so it has
# an environment of its own. Its source is read from a git clone of EasyR1's repository (hiyouga/EasyR1 on
# GitHub) at $EASYR1_GIT, default framework_audit/.easyr1.git (git-ignored):
#     git clone --bare <EasyR1 repository> framework_audit/.easyr1.git
# Without that clone the build stops with exit 3 (run_all.sh then keeps EasyR1's committed result).
# Rebuilt only when the requirements file is newer than the stamp or the pinned commit is not the one built.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=framework_audit/.venv-easyr1
REQ=framework_audit/requirements-easyr1.txt
BASE=framework_audit/.venv-torch
GIT=${EASYR1_GIT:-framework_audit/.easyr1.git}
COMMIT=$(python3 -c "import sys; sys.path.insert(0, '.'); from framework_audit.frameworks import framework; print(framework('easyr1').commit)")
if [ -f "$VENV/.installed" ] && [ ! "$REQ" -nt "$VENV/.installed" ] && [ "$(cat "$VENV/.commit" 2>/dev/null)" = "$COMMIT" ]; then
    echo "EasyR1 environment: up to date ($VENV)"; exit 0
fi
if ! git -C "$GIT" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    echo "error: EasyR1 commit $COMMIT not found in $GIT: clone EasyR1's repository (hiyouga/EasyR1) there" \
        "or set EASYR1_GIT" >&2
    exit 3
fi
start=$(date +%s)
bash framework_audit/build_env.sh liger_kernel >/dev/null  # builds the shared torch base if it is missing or stale
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git -C "$GIT" archive "$COMMIT" | tar -x -C "$src"  # the commit's tree exactly: its id pins every file
rm -rf "$VENV" && python3 -m venv --without-pip "$VENV"
purelib() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
base_site=$(cd "$(purelib "$BASE")" && pwd)
echo "$base_site" > "$(purelib "$VENV")/_conformance_torch.pth"
quiet() { grep -v "^WARNING: Location" || true; }
"$BASE/bin/python" -m pip --python "$VENV/bin/python" install -q --no-deps -r "$REQ" 2>&1 | quiet
# built with the pinned setuptools and wheel of requirements-easyr1.txt
"$BASE/bin/python" -m pip --python "$VENV/bin/python" install -q --no-deps --no-build-isolation "$src" 2>&1 | quiet
echo "$COMMIT" > "$VENV/.commit"
touch "$VENV/.installed"
mb=$(du -sm "$VENV" | cut -f1)
seconds=$(( $(date +%s) - start ))
printf '{"build_seconds": %s, "size_mb": %s}\n' "$seconds" "$mb" > "$VENV/.build.json"
echo "environment $VENV: built in $seconds s, $mb MB (plus $BASE)"
