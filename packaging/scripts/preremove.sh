#!/bin/sh
# meshnode pre-remove: stops the service on removal (it drains in-flight
# requests on SIGTERM, for up to TimeoutStopSec); an upgrade leaves it
# running for postinst to restart.
#   deb prerm: remove|upgrade|deconfigure|failed-upgrade ...
#   rpm %preun: 0 (remove) | 1 (upgrade)
set -e

unit=meshnode.service

case "$1" in
remove | deconfigure | 0) ;;
*) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
	if [ -n "${DPKG_MAINTSCRIPT_PACKAGE:-}" ] && command -v deb-systemd-invoke >/dev/null; then
		deb-systemd-invoke stop "$unit" || true
	else
		systemctl stop "$unit" || true
	fi
fi
# rpm removes the unit before %postun runs: disable while it still exists.
if [ "$1" = 0 ] && command -v systemctl >/dev/null; then
	systemctl disable "$unit" >/dev/null 2>&1 || true
fi
exit 0
