#!/usr/bin/env bash
# Commits side by side on one broker: for each round, each commit's `python -m bench.run`
# (micro and pipeline steps) in turn, so that a noisy machine hits every commit alike.
#
#   bench/side_by_side.sh COMMIT [COMMIT...]      (from the repository root, after `make venv`)
#
# BENCH_RECORDS (3000) and SIDE_ROUNDS (2) set the size; reports go to .cache/side-by-side/.
set -euo pipefail
[ "$#" -ge 1 ] || { echo "usage: bench/side_by_side.sh COMMIT [COMMIT...]" >&2; exit 2; }
root=$(pwd)
out="$root/.cache/side-by-side"
trees=$(mktemp -d)
mkdir -p "$out"
cleanup() {
    .venv/bin/hopchain dev kafka stop >/dev/null 2>&1 || true
    for commit in "$@"; do git worktree remove --force "$trees/$commit" 2>/dev/null || true; done
    rm -rf "$trees"
}
trap 'cleanup "$@"' EXIT
for commit in "$@"; do git worktree add -q --detach "$trees/$commit" "$commit"; done
bootstrap=$(.venv/bin/hopchain dev kafka start --port 0 --controller-port 0 --json \
    | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["bootstrap"])')
export HOPCHAIN_KAFKA_BOOTSTRAP=$bootstrap
for round in $(seq 1 "${SIDE_ROUNDS:-2}"); do
    for commit in "$@"; do
        (cd "$trees/$commit" && PYTHONPATH=. BENCH_RECORDS="${BENCH_RECORDS:-3000}" \
            BENCH_ROUNDS=1 BENCH_STEPS=micro,pipeline BENCH_PROFILE=0 BENCH_MICRO_REPEATS=5 \
            BENCH_OUTPUT="$out/$commit-$round.md" "$root/.venv/bin/python" -m bench.run \
            > "$out/$commit-$round.log" 2>&1)
        echo "$commit round $round: load $(cut -d' ' -f1 /proc/loadavg)"
        grep -E "round 1 (plain|headers|body|aiokafka)" "$out/$commit-$round.log" || true
    done
done
