#!/usr/bin/env bash
# Builds meshnode's packages and release artefacts into $DIST (dist/).
#
#   packaging/build.sh package   .deb and .rpm for linux/amd64 and linux/arm64
#   packaging/build.sh release   a clean $DIST with those, the darwin/arm64
#                                .tar.gz, and SHA256SUMS; prints the sizes
#
# The Makefile's `package` and `release` targets call it with GO, VERSION,
# LDFLAGS and NFPM (the pinned nfpm module). Builds are reproducible: the
# same commit gives the same bytes (-trimpath, no build id, no VCS stamp,
# file times from SOURCE_DATE_EPOCH = the commit's time).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIST=${DIST:-dist}
NFPM=${NFPM:?NFPM names the pinned nfpm module, e.g. github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
LDFLAGS=${LDFLAGS:-"-s -w -buildid= -X github.com/meshnode/meshnode/node.Version=$VERSION"}
PKG_VERSION=${PKG_VERSION:-$(packaging/version.sh)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH
# The baseline ISA levels, whatever the environment says: Jetson Nano is
# ARMv8.0.
export GOAMD64=v1 GOARM64=v8.0 CGO_ENABLED=0

LINUX_ARCHES=(amd64 arm64)
MODEL=models/meshnode-fortunes-q8_0.gguf

# build GOOS GOARCH: the two binaries into $DIST/build/GOOS_GOARCH.
build() {
	local out="$DIST/build/$1_$2"
	mkdir -p "$out"
	GOOS=$1 GOARCH=$2 "$GO" build -trimpath -buildvcs=false -ldflags "$LDFLAGS" -o "$out/" ./cmd/meshnode ./cmd/meshcli
}

# nfpm, built once per pinned version into bin/tools (`go install pkg@version`
# leaves go.mod alone: nfpm is a tool, not a dependency of the binaries).
nfpm_bin() {
	local dir="bin/tools/nfpm-${NFPM##*@}"
	if [ ! -x "$dir/nfpm" ]; then
		GOBIN="$PWD/$dir" CGO_ENABLED=0 "$GO" install "$NFPM" >&2
	fi
	echo "$dir/nfpm"
}

packages() {
	local nfpm arch fmt
	nfpm=$(nfpm_bin)
	for arch in "${LINUX_ARCHES[@]}"; do
		build linux "$arch"
		for fmt in deb rpm; do
			MESHNODE_ARCH=$arch MESHNODE_PKG_VERSION=$PKG_VERSION MESHNODE_BIN_DIR="$DIST/build/linux_$arch" \
				"$nfpm" package --config packaging/nfpm.yaml --packager "$fmt" --target "$DIST/" >&2
		done
	done
}

# darwin_tarball: bin/ and share/ laid out as a prefix, so the built-in model
# is where the node looks beside its binary (bin/../share/meshnode/models).
darwin_tarball() {
	local name="meshnode-$PKG_VERSION-darwin-arm64"
	local stage="$DIST/stage/$name"
	build darwin arm64
	rm -rf "$stage"
	install -d "$stage/bin" "$stage/share/meshnode/models" "$stage/share/meshnode/launchd"
	install -m 0755 "$DIST/build/darwin_arm64/meshnode" "$DIST/build/darwin_arm64/meshcli" "$stage/bin/"
	install -m 0644 "$MODEL" models/README.md "$stage/share/meshnode/models/"
	install -m 0644 node/config.example.toml "$stage/share/meshnode/config.example.toml"
	install -m 0644 packaging/darwin/io.meshnode.meshnode.plist "$stage/share/meshnode/launchd/"
	install -m 0644 packaging/darwin/README.md "$stage/README.md"
	tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--format=gnu -C "$DIST/stage" -cf - "$name" | gzip -9n >"$DIST/$name.tar.gz"
}

sizes() {
	echo
	echo "binaries (bytes):"
	local d
	for d in "$DIST"/build/*/; do
		(cd "$d" && for f in meshnode meshcli; do printf '  %-14s %-8s %10d\n' "$(basename "$d")" "$f" "$(stat -c %s "$f")"; done)
	done
	echo "artefacts (bytes):"
	(cd "$DIST" && for f in *.deb *.rpm *.tar.gz; do
		if [ -e "$f" ]; then printf '  %-56s %10d\n' "$f" "$(stat -c %s "$f")"; fi
	done)
}

case "${1:-}" in
package)
	packages
	sizes
	;;
release)
	rm -rf "$DIST"
	packages
	darwin_tarball
	rm -rf "$DIST/stage"
	(cd "$DIST" && sha256sum -- *.deb *.rpm *.tar.gz >SHA256SUMS)
	sizes
	echo
	echo "$DIST/SHA256SUMS:"
	sed 's/^/  /' "$DIST/SHA256SUMS"
	;;
*)
	echo "usage: $0 package|release" >&2
	exit 2
	;;
esac
