#!/bin/sh
# Runs each C test binary given and names, at the end, every one that failed: its exit status,
# and whether it died before its summary line (a sanitizer's report, LeakSanitizer's at exit
# included, ends a test that way). Exits non-zero if any failed. Used by `make check`.
# CHECK_JOBS (default 2) binaries run at a time: most of a test's time is waiting on its
# sockets and timers. Each one's output is printed whole, in the order given, once all ran.
label=${CHECK_LABEL:-plain}
jobs=${CHECK_JOBS:-2}
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
i=0
for t in "$@"; do
    i=$((i + 1))
    printf '%s %s\n' "$i" "$t"
done | xargs -P "$jobs" -L 1 sh -c '"$2" >"$0/$1.out" 2>&1; echo $? >"$0/$1.rc"' "$dir"
failed=""
passed=0
i=0
for t in "$@"; do
    i=$((i + 1))
    out="$dir/$i.out"
    [ -f "$out" ] || : >"$out"
    rc=$(cat "$dir/$i.rc" 2>/dev/null) || rc="? (it did not run)"
    echo "== $t"
    cat "$out"
    name=$(basename "$t")
    # Two summary forms: lg_test.h's "FILE: N checks, M failed", or a TAP plan "1..N" with
    # its N "ok" lines.
    plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\)$/\1/p' "$out" | tail -n 1)
    oks=$(grep -c '^ok ' "$out")
    if [ "$rc" = 0 ] && { grep -Eq "^tests/$name\.c: [0-9]+ checks, 0 failed$" "$out" ||
                            { [ -n "$plan" ] && [ "$oks" -eq "$plan" ]; }; }; then
        passed=$((passed + 1))
    elif grep -Eq "^tests/$name\.c: [0-9]+ checks, [0-9]+ failed$" "$out"; then
        failed="$failed
  $name: exit $rc, $(grep -E "^tests/$name\.c: " "$out" | tail -n 1) (a failed check, or a sanitizer's report at exit)"
    elif [ -n "$plan" ] && [ "$oks" -eq "$plan" ]; then
        failed="$failed
  $name: exit $rc after all $plan of its TAP tests passed (a sanitizer's report at exit?)"
    elif [ -n "$plan" ]; then
        failed="$failed
  $name: exit $rc, $oks of $plan TAP tests ok"
    else
        failed="$failed
  $name: exit $rc before its summary line (a crash or a sanitizer's report: see above)"
    fi
done
if [ -n "$failed" ]; then
    echo "C tests ($label) that failed:$failed"
    exit 1
fi
echo "C tests ($label): all $passed passed"
