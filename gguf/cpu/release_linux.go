package cpu

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// releasePages asks the kernel to reclaim the whole pages of b now
// (MADV_PAGEOUT, Linux 5.4 and later): a weight packed for products from
// memory is not read from its file's mapping again, so its pages would
// only double the process's resident memory until memory ran short.
// PAGEOUT loses nothing, whatever b is: a file's pages are read again if
// touched (the one-row rows that finish a packed weight's last partial
// tile, a tied embedding's rows), an anonymous page is swapped or kept.
// It is advice: an older kernel's refusal leaves the pages where they are.
func releasePages(b []byte) error {
	page := os.Getpagesize()
	if len(b) < page {
		return nil
	}
	start := (page - int(uintptr(unsafe.Pointer(unsafe.SliceData(b))))%page) % page
	end := start + (len(b)-start)/page*page
	if end <= start {
		return nil
	}
	return unix.Madvise(b[start:end], unix.MADV_PAGEOUT)
}
