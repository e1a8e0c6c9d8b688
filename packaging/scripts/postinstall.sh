#!/bin/sh
# meshnode post-install: GPU groups on Jetson, then enable and start the
# service (restart it on upgrade). Without a running systemd (a chroot, an
# image build) the unit is only enabled and starts at the next boot.
#   deb postinst: configure <previously configured version, empty on first install>
#                 | abort-upgrade | abort-remove | abort-deconfigure
#   rpm %post:    1 (install) | 2 (upgrade)
set -e

unit=meshnode.service

case "$1" in
configure) if [ -z "$2" ]; then action=install; else action=upgrade; fi ;;
abort-upgrade | abort-remove | abort-deconfigure) action=upgrade ;;
1) action=install ;;
[0-9]*) action=upgrade ;;
*) exit 0 ;;
esac

# On Jetson the GPU (/dev/nvmap, /dev/nvhost-*, /dev/dri/renderD*) belongs to
# the video and render groups; without them CUDA fails with
# "NvRmMemInitNvmap failed with Permission denied" and inference silently
# stays on the CPU.
if [ -e /etc/nv_tegra_release ] || grep -qs 'nvidia,tegra' /proc/device-tree/compatible; then
	for g in video render; do
		if getent group "$g" >/dev/null; then
			usermod --append --groups "$g" meshnode
		fi
	done
fi

# Apply the RAPL rule to the zones that already exist.
if [ -S /run/udev/control ] && command -v udevadm >/dev/null; then
	udevadm control --reload || true
	udevadm trigger --action=add --subsystem-match=powercap || true
fi

# Enable: under dpkg through deb-systemd-helper, which remembers an admin's
# `systemctl disable` across upgrades and a remove/reinstall; under rpm on
# first install only. Both work without a running systemd.
if [ -n "${DPKG_MAINTSCRIPT_PACKAGE:-}" ] && command -v deb-systemd-helper >/dev/null; then
	deb-systemd-helper unmask "$unit" >/dev/null || true
	if deb-systemd-helper --quiet was-enabled "$unit"; then
		deb-systemd-helper enable "$unit" >/dev/null || true
	else
		deb-systemd-helper update-state "$unit" >/dev/null || true
	fi
elif [ "$action" = install ] && command -v systemctl >/dev/null; then
	systemctl enable "$unit" >/dev/null 2>&1 || true
fi

# Start (or restart a running one on upgrade) only under a running systemd.
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
	if [ "$action" = install ]; then verb=start; else verb=try-restart; fi
	if [ -n "${DPKG_MAINTSCRIPT_PACKAGE:-}" ] && command -v deb-systemd-invoke >/dev/null; then
		# As debhelper does: start on a first install, restart otherwise,
		# which also starts the node after `apt remove` and a reinstall
		# (dpkg passes the removed version, so that is no first install).
		# deb-systemd-invoke starts nothing the admin disabled, and honours
		# policy-rc.d, which forbids starting services in image builds.
		if [ "$verb" = try-restart ]; then verb=restart; fi
		deb-systemd-invoke "$verb" "$unit" || true
	else
		systemctl "$verb" "$unit" || true
	fi
fi
exit 0
