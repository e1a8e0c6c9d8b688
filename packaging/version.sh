#!/bin/sh
# Prints the package version for this checkout, one that dpkg and rpm both
# order correctly: v1.2.3 on a tag gives 1.2.3; 4 commits after it,
# 1.2.3+git.4.gabcdef0; with no tag, 0.0.0+git.<commits>.g<hash>. A dirty
# tree appends .dirty.
set -eu
cd "$(dirname "$0")/.."
d=$(git describe --tags --match 'v[0-9]*' --long --dirty 2>/dev/null) || d=
if [ -z "$d" ]; then
	n=$(git rev-list --count HEAD)
	h=$(git rev-parse --short=7 HEAD)
	v="0.0.0+git.$n.g$h"
	if ! git diff --quiet HEAD -- 2>/dev/null; then v="$v.dirty"; fi
	echo "$v"
	exit 0
fi
dirty=
case "$d" in *-dirty) dirty=.dirty; d=${d%-dirty} ;; esac
hash=${d##*-}        # gabcdef0
rest=${d%-*}
count=${rest##*-}    # commits since the tag
tag=${rest%-*}       # v1.2.3
v=${tag#v}
if [ "$count" != 0 ]; then v="$v+git.$count.$hash"; fi
echo "$v$dirty"
