//go:build (amd64 || arm64) && !purego

package quant

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHuge asks the kernel to back b's whole huge pages with
// transparent huge pages (MADV_HUGEPAGE) before it is first written: a
// packed copy of a 1B model's weights is 1.2 GB of fresh memory, and
// faulting it in 4 KB at a time cost seconds at the first prompt. It is
// advice: where transparent huge pages are off, or b is smaller than one,
// nothing changes.
func adviseHuge(b []byte) {
	const huge = 2 << 20
	if len(b) < huge || os.Getpagesize() > huge {
		return
	}
	at := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := int((huge - at%huge) % huge)
	end := start + (len(b)-start)/huge*huge
	if end > start {
		_ = unix.Madvise(b[start:end], unix.MADV_HUGEPAGE)
	}
}
