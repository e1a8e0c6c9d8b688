// Package packaging holds what installs meshnode as a service: the systemd
// unit, udev rule and maintainer scripts in linux/ and scripts/, the nfpm
// recipe for the .deb and .rpm (nfpm.yaml, built by build.sh), the macOS
// tarball's README in darwin/, and the launchd job in the launchd
// sub-package. Its tests hold the unit to its hardening and the recipe to
// the files it must ship; test/check.sh builds, inspects and installs the
// packages in a chroot.
package packaging
