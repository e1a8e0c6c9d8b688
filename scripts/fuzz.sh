#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 10s).
# Go fuzzes one target per invocation, so targets are listed per package.
#
# Go 1.26's fuzz coordinator can fail a run with a bare "context deadline
# exceeded" at the end of -fuzztime when a loaded machine starves its
# workers (golang/go#75804, fixed in Go 1.27). Such a run wrote no failing
# input; it counts as passed only if no new input appeared under
# testdata/fuzz/<target> and the target's whole corpus then replays clean.
# Any other failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
pkgs=$(go list ./...) # a failure here must fail the run, not fuzz nothing
n=0
flaked=0
inputs() { if [ -d "$1" ]; then ls "$1" | wc -l; else echo 0; fi; }
for pkg in $pkgs; do
	listed=$(CGO_ENABLED=0 go test -list '^Fuzz' "$pkg") # fails on a package that does not build
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep '^Fuzz' <<<"$listed" || true); do
		echo "fuzz $pkg $target ($fuzztime)"
		corpus="$dir/testdata/fuzz/$target"
		before=$(inputs "$corpus")
		log=$(mktemp)
		if ! CGO_ENABLED=0 go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"; then
			after=$(inputs "$corpus")
			if [ "$after" -eq "$before" ] && grep -qx '    context deadline exceeded' "$log" &&
				! grep -q 'Failing input written' "$log"; then
				echo "fuzz: $target stopped on golang/go#75804 with no failing input; replaying its corpus"
				CGO_ENABLED=0 go test -run "^${target}\$" "$pkg"
				flaked=$((flaked + 1))
			else
				rm -f "$log"
				exit 1
			fi
		fi
		rm -f "$log"
		n=$((n + 1))
	done
done
echo "ran $n fuzz targets ($flaked stopped on the coordinator's deadline race, corpus replayed clean)"
[ "$n" -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }
