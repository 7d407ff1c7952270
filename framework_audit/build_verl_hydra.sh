#!/usr/bin/env bash
# Build framework_audit/.venv-verl-hydra: verl's audit environment (framework_audit/.venv-verl, read through a
# .pth file, with the shared torch it reads) plus Hydra from requirements-verl-hydra.txt, for
# framework_audit/settings_reach_verl.py. Rebuilt only when a requirements file is newer than the stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
bash framework_audit/build_env.sh verl
VENV=framework_audit/.venv-verl-hydra
REQ=framework_audit/requirements-verl-hydra.txt
if [ -f "$VENV/.installed" ] && [ ! "$REQ" -nt "$VENV/.installed" ] \
        && [ ! framework_audit/.venv-verl/.installed -nt "$VENV/.installed" ]; then
    echo "verl + Hydra environment: up to date ($VENV)"; exit 0
fi
start=$(date +%s)
rm -rf "$VENV" && python3 -m venv --without-pip "$VENV"
purelib() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
site=$(purelib "$VENV")
verl_site=$(cd "$(purelib framework_audit/.venv-verl)" && pwd)
torch_site=$(cd "$(purelib framework_audit/.venv-torch)" && pwd)
printf '%s\n%s\n' "$verl_site" "$torch_site" > "$site/_verl_and_torch.pth"
framework_audit/.venv-torch/bin/python -m pip --python "$VENV/bin/python" install -q --no-deps -r "$REQ" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
touch "$VENV/.installed"
mb=$(du -sm "$VENV" | cut -f1)
seconds=$(( $(date +%s) - start ))
printf '{"build_seconds": %s, "size_mb": %s}\n' "$seconds" "$mb" > "$VENV/.build.json"
echo "environment $VENV: built in $seconds s, $mb MB (plus framework_audit/.venv-verl and .venv-torch)"
