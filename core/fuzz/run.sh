#!/bin/sh
# Build hopchain-core's fuzz targets with libFuzzer's coverage instrumentation (stable rustc:
# LLVM's sancov pass, no sanitizer) and run each for a bounded time or number of executions.
# Prints each target's executions, exec/s and coverage; exits 1 if any target crashed (a
# panic, a failed check, a timeout or running out of memory), its input in artifacts/.
#
#   core/fuzz/run.sh                       # every target, FUZZ_SECONDS (5) each
#   FUZZ_RUNS=10000000 FUZZ_SECONDS=0 core/fuzz/run.sh record   # 10 million executions
#
# FUZZ_SECONDS: seconds per target (0: no bound); FUZZ_RUNS: executions per target (0: no
# bound); FUZZ_JOBS: cargo's build jobs (cargo's default when unset); FUZZ_ARGS: more
# libFuzzer options. The corpus each run grows is kept in corpus/<target> (ignored by git);
# the seeds are written again from the vectors by seeds.py.
set -eu

cd "$(dirname "$0")"
TARGETS=${*:-envelope record traceparent deadletter writer}
SECONDS_EACH=${FUZZ_SECONDS:-5}
RUNS=${FUZZ_RUNS:-0}
[ "$RUNS" -gt 0 ] || RUNS=-1 # libFuzzer: -1 is no bound
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
BIN=target/$TRIPLE/release

python3 seeds.py seeds >/dev/null

# --target keeps these flags off build scripts, which are not linked with libFuzzer.
RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
    cargo build --quiet --release --locked --target "$TRIPLE" --bins ${FUZZ_JOBS:+-j "$FUZZ_JOBS"}

status=0
for target in $TARGETS; do
    mkdir -p "corpus/$target" "artifacts/$target" logs
    log="logs/$target.log"
    # shellcheck disable=SC2086 # FUZZ_ARGS holds several options
    if "$BIN/$target" -dict=envelope.dict -max_total_time="$SECONDS_EACH" -runs="$RUNS" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="artifacts/$target/" ${FUZZ_ARGS:-} \
        "corpus/$target" "seeds/$target" >"$log" 2>&1; then
        verdict=ok
    else
        verdict="CRASH (see core/fuzz/$log)"
        status=1
        grep -E "panicked at|^SUMMARY|Test unit written" "$log" | sed 's/^/    /' || true
    fi
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    coverage=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)
    printf '%-12s %12s executions %9s exec/s  %-22s %s\n' \
        "$target" "${executions:-?}" "${speed:-?}" "${coverage:-cov: ?}" "$verdict"
done
exit $status
