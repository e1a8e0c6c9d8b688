#!/bin/sh
# meshnode pre-install: creates the meshnode system user and group before
# the package's files are unpacked, so /etc/meshnode/config.toml gets its
# group.
#   deb preinst: install|upgrade|abort-upgrade <version>
#   rpm %pre:    1 (install) | 2 (upgrade)
set -e

case "$1" in
abort-upgrade) exit 0 ;;
esac

if ! getent group meshnode >/dev/null; then
	groupadd --system meshnode
fi
if ! getent passwd meshnode >/dev/null; then
	# No login, no home of its own beyond the state directory systemd makes.
	useradd --system --gid meshnode --home-dir /var/lib/meshnode --no-create-home \
		--shell /usr/sbin/nologin --comment "meshnode inference node" meshnode
fi
exit 0
