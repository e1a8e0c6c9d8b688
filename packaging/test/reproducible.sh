#!/usr/bin/env bash
# Checks that `make release` is reproducible: two builds of the committed
# HEAD, from clones at different paths and with separate, empty Go build
# caches, must give the same SHA256SUMS (binaries, packages and tarball).
# A difference names the artefacts that differ.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
rev=$(git rev-parse HEAD)
for side in a b/deeper/path; do
	git clone -q . "$tmp/$side/src"
	git -C "$tmp/$side/src" checkout -q "$rev"
	(
		cd "$tmp/$side/src"
		GOCACHE="$tmp/$side/gocache" make -s release >/dev/null
	)
done
a=$tmp/a/src/dist/SHA256SUMS
b=$tmp/b/deeper/path/src/dist/SHA256SUMS
if ! diff -u "$a" "$b"; then
	echo "make release is not reproducible: the artefacts above differ between two clean builds" >&2
	exit 1
fi
echo "make release is reproducible: $(wc -l <"$a") artefacts identical across two clean builds"
cat "$a"
