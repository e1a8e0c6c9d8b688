#!/bin/sh
# meshnode post-remove. Removal keeps the configuration and the node's state
# (its key and receipt journal); only a purge deletes them. The meshnode user
# stays (files it owned may remain elsewhere, and a reinstall reuses it).
#   deb postrm: remove|purge|upgrade|failed-upgrade|abort-install|abort-upgrade|disappear
#   rpm %postun: 0 (remove) | 1 (upgrade)
set -e

unit=meshnode.service

case "$1" in
remove | 0)
	# As debhelper does: remember the enable state for a reinstall.
	if [ -n "${DPKG_MAINTSCRIPT_PACKAGE:-}" ] && command -v deb-systemd-helper >/dev/null; then
		deb-systemd-helper mask "$unit" >/dev/null || true
	fi
	;;
purge)
	if [ -n "${DPKG_MAINTSCRIPT_PACKAGE:-}" ] && command -v deb-systemd-helper >/dev/null; then
		deb-systemd-helper purge "$unit" >/dev/null || true
		deb-systemd-helper unmask "$unit" >/dev/null || true
	fi
	# The node key, the steward's journal, tokens and downloaded models.
	rm -rf /var/lib/meshnode
	# dpkg has removed config.toml; this takes what an admin left beside it.
	rm -rf /etc/meshnode
	;;
*) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if [ -S /run/udev/control ] && command -v udevadm >/dev/null; then
	udevadm control --reload || true
fi
exit 0
