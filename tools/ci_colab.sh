#!/usr/bin/env bash
# The Colab-like leg: every chapter copied alone into an empty folder and executed top to bottom by nbval in a fresh
# environment at the versions Colab ships (tools/colab_requirements.txt says where they come from), with
# SAPO_LAB_REPOSITORY pointing at a clean clone of this checkout: the first cell installs sapo_lab from it
# and fetches the chapter's committed results, as it does from the repository on Colab.
#
#   bash tools/ci_colab.sh                 # build the environment if needed, run every chapter
#   bash tools/ci_colab.sh --build-only    # build the environment only
#   bash tools/ci_colab.sh 10c 12          # the chapters whose file names start with these
#
# sapo_lab is not preinstalled: the first chapter's first cell installs it (the line a reader runs), and
# later chapters find it, as a second notebook in one runtime would. Each chapter gets its own empty
# data cache, so each fetches exactly what it reads. Chapters run two at a time (JOBS=2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=_build/colab
VENV=$WORK/venv
PYTHON=${COLAB_PYTHON:-python3.11}
JOBS=${JOBS:-2}

if [ ! -f "$VENV/.installed" ] || [ tools/colab_requirements.txt -nt "$VENV/.installed" ] \
        || [ requirements.txt -nt "$VENV/.installed" ]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    # Colab's versions, plus nbval at requirements.txt's pins (the runner, not something a chapter imports)
    grep -E '^(pytest|nbval)==' requirements.txt > "$WORK/runner.txt"
    "$VENV/bin/python" -m pip install -q -r tools/colab_requirements.txt -r "$WORK/runner.txt" \
        -c tools/colab_requirements.txt
    touch "$VENV/.installed"
fi
if [ "${1:-}" = --build-only ]; then exit 0; fi

# outside the checkout: inside it, a chapter reads the repository's results and fetches nothing
RUN=$(mktemp -d "${TMPDIR:-/tmp}/sapo-colab-XXXXXX")
echo "chapters run in $RUN"
rm -rf "$WORK/clone"
git clone -q --no-local . "$WORK/clone"          # the committed files only, as a reader's source holds
chapters=()
if [ $# -eq 0 ]; then
    for nb in "$WORK"/clone/book/*.ipynb; do chapters+=("$nb"); done
else
    for prefix in "$@"; do chapters+=("$WORK"/clone/book/"$prefix"*.ipynb); done
fi
"$VENV/bin/python" -m pip uninstall -q -y sapo-lab 2>/dev/null || true
export SAPO_LAB_REPOSITORY=$ROOT/$WORK/clone
export OMP_NUM_THREADS=1 MPLBACKEND=agg

run_chapter() {  # run_chapter PATH/X.ipynb: execute a copy alone in an empty folder; log to $RUN/X/log
    local name dir start
    name=$(basename "$1" .ipynb)
    dir=$RUN/$name
    mkdir -p "$dir"
    cp "$1" "$dir/"
    start=$(date +%s)
    # A kernel that stops answering (seen once: an idle kernel, no cell running) is given up after 240 s
    # and the chapter is run once more from its empty folder; no chapter's cell takes a minute here.
    local attempt ok=1
    for attempt in 1 2; do
        if (cd "$dir" && SAPO_LAB_CACHE=$dir/cache "$ROOT/$VENV/bin/python" -m pytest -q -p no:cacheprovider \
                --nbval-lax --nbval-current-env --nbval-cell-timeout=240 "$name.ipynb") \
                > "$dir/log" 2>&1; then
            ok=0; break
        fi
        echo "retrying $name (attempt $attempt failed after $(( $(date +%s) - start )) s)"
        rm -rf "$dir/cache"
    done
    if [ "$ok" = 0 ]; then
        # a data chapter must have fetched into its own cache, not found a checkout above it
        local fetched
        fetched=$(find "$dir/cache" -type f 2>/dev/null | wc -l)
        if grep -q 'chapter_data(' "$dir/$name.ipynb" && [ "$fetched" = 0 ]; then
            echo "FAILED $name: its first cell fetched nothing"; return 1
        fi
        echo "passed $name in $(( $(date +%s) - start )) s, $fetched files fetched"
    else
        echo "FAILED $name after $(( $(date +%s) - start )) s"; tail -25 "$dir/log"; return 1
    fi
}
export -f run_chapter
export ROOT WORK VENV RUN

start=$(date +%s)
failed=0
# the first chapter alone: its first cell installs sapo_lab into the environment the others then use
run_chapter "${chapters[0]}" || failed=1
if [ ${#chapters[@]} -gt 1 ]; then
    printf '%s\n' "${chapters[@]:1}" | xargs -P "$JOBS" -I{} bash -c 'run_chapter {}' || failed=1
fi
echo "colab leg: ${#chapters[@]} chapters in $(( $(date +%s) - start )) s"
if [ "$failed" = 0 ]; then rm -rf "$RUN"; else echo "the chapters' folders and logs kept in $RUN"; fi
exit "$failed"
