#!/usr/bin/env bash
# Runs each libFuzzer harness for SECONDS from its committed seeds (fuzz/corpus/NAME, never
# written) plus what earlier runs found (BUILD/corpus/NAME). Fails on any crash, leak, UB,
# assertion or hang (-timeout); the failing input is BUILD/artifacts/NAME-crash-* (or leak-,
# timeout-, oom-), and BUILD/logs/NAME.log has the report.
# Usage: fuzz/run.sh BUILD SECONDS HARNESS...
# fuzz/NAME.options, when present, adds libFuzzer flags (one per line) for that harness.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 seconds=$2
shift 2
timeout_s=${FUZZ_TIMEOUT:-10} # one input running longer is a hang
mkdir -p "$build/corpus" "$build/artifacts" "$build/logs"
passed=0 failed=0
for bin in "$@"; do
    name=$(basename "$bin")
    mkdir -p "$build/corpus/$name" "$here/corpus/$name"
    opts=()
    [ -f "$here/$name.options" ] && mapfile -t opts < <(grep -v -e '^#' -e '^$' "$here/$name.options")
    log="$build/logs/$name.log"
    "$bin" -max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" "${opts[@]}" \
        "$build/corpus/$name" "$here/corpus/$name" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok   $name: ${execs:-?} executions (${rate:-?}/s) in ${seconds}s, ${cov:-cov: ?}"
    else
        failed=$((failed + 1))
        echo "FAIL $name (exit $rc): see $log; reproduce: $bin $build/artifacts/$name-*"
        grep -m1 -E 'ERROR|runtime error|fuzz assertion|timeout|leak' "$log" | sed 's/^/     /'
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
