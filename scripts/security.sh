#!/usr/bin/env bash
# make security: the attacks docs/security.md lists, each a test that
# reproduces one on loopback (TestAttack*) and must see it refused. Prints
# a line per attack and anything that failed; exits non-zero if any did.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
CGO_ENABLED=0 ${GO:-go} test -count=1 -run '^TestAttack' -v ./... >"$out" 2>&1
rc=$?
grep -vE '(no tests to run\]?$|no test files\]$|^=== |^PASS$|^ok )' "$out"
echo "security: $(grep -c '^--- PASS' "$out") attacks refused, $(grep -c '^--- FAIL' "$out") not"
exit $rc
