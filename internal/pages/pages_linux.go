package pages

import (
	"os"

	"golang.org/x/sys/unix"
)

// hugePage is the unit AdviseHuge advises in: a transparent huge page
// on amd64 and on arm64 with 4 KB pages.
const hugePage = 2 << 20

// Release asks the kernel to reclaim b's whole pages now (MADV_PAGEOUT,
// Linux 5.4 and later): for a copy's source that is not read again, so
// that the process does not hold both. It loses nothing, whatever b is:
// a file's pages are read again if touched, an anonymous page is swapped
// or kept. An older kernel refuses, and the pages stay.
func Release(b []byte) error {
	if w := Whole(b, uintptr(os.Getpagesize())); len(w) > 0 {
		return unix.Madvise(w, unix.MADV_PAGEOUT)
	}
	return nil
}

// AdviseHuge asks the kernel to back b's whole huge pages with
// transparent huge pages (MADV_HUGEPAGE) before b is first written: 1.2
// GB of fresh memory faulted in 4 KB at a time cost seconds. Where
// transparent huge pages are off, or a page is larger than hugePage,
// nothing changes.
func AdviseHuge(b []byte) {
	if os.Getpagesize() > hugePage {
		return
	}
	if w := Whole(b, hugePage); len(w) > 0 {
		_ = unix.Madvise(w, unix.MADV_HUGEPAGE)
	}
}
