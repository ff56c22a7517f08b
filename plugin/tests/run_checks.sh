#!/bin/sh
# Runs each C test binary given and names, at the end, every one that failed: its exit status,
# and whether it died before its summary line (a sanitizer's report, LeakSanitizer's at exit
# included, ends a test that way). Exits non-zero if any failed. Used by `make check`.
label=${CHECK_LABEL:-plain}
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
failed=""
passed=0
for t in "$@"; do
    echo "== $t"
    "$t" >"$out" 2>&1
    rc=$?
    cat "$out"
    name=$(basename "$t")
    # Two summary forms: lg_test.h's "FILE: N checks, M failed", or a TAP plan "1..N" with
    # its N "ok" lines.
    plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\)$/\1/p' "$out" | tail -n 1)
    oks=$(grep -c '^ok ' "$out")
    if [ "$rc" -eq 0 ] && { grep -Eq "^tests/$name\.c: [0-9]+ checks, 0 failed$" "$out" ||
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
