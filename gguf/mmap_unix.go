//go:build linux || darwin

package gguf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps path read-only and shared: the pages are the page cache's, so
// several processes serving one model share one copy.
func mapFile(path string) (data []byte, unmap func() error, mapped bool, err error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, false, err
	}
	defer fd.Close() // the mapping outlives the descriptor
	st, err := fd.Stat()
	if err != nil {
		return nil, nil, false, err
	}
	size := st.Size()
	if size == 0 {
		return []byte{}, nil, false, nil // nothing to map; parse reports it
	}
	if size != int64(int(size)) {
		return nil, nil, false, fmt.Errorf("map %s: file of %d bytes is too large to map", path, size)
	}
	b, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, false, fmt.Errorf("mmap %s: %w", path, err)
	}
	return b, func() error { return unix.Munmap(b) }, true, nil
}
