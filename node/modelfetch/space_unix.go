//go:build unix

package modelfetch

import "golang.org/x/sys/unix"

// freeSpace is what an unprivileged writer may still put in dir's file
// system, in bytes; ok is false when it cannot be told.
func freeSpace(dir string) (free uint64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}
