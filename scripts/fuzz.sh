#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 10s).
# Go fuzzes one target per invocation, so targets are listed per package.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
pkgs=$(go list ./...) # a failure here must fail the run, not fuzz nothing
n=0
for pkg in $pkgs; do
	listed=$(CGO_ENABLED=0 go test -list '^Fuzz' "$pkg") # fails on a package that does not build
	for target in $(grep '^Fuzz' <<<"$listed" || true); do
		echo "fuzz $pkg $target ($fuzztime)"
		CGO_ENABLED=0 go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
		n=$((n + 1))
	done
done
echo "ran $n fuzz targets"
[ "$n" -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }
