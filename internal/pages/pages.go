// Package pages gives the kernel advice about the memory behind a byte
// slice, in the whole pages (or huge pages) the slice covers: that a
// slice will not be read again (Release), or should be backed by
// transparent huge pages before it is first written (AdviseHuge). Advice
// changes no byte a slice holds; where the system does not take it,
// nothing changes.
package pages

import "unsafe"

// Whole is the part of b made of whole units of unit bytes, aligned to
// unit in memory; empty where b covers none.
func Whole(b []byte, unit uintptr) []byte {
	if len(b) == 0 || unit == 0 {
		return nil
	}
	start := (unit - addr(b)%unit) % unit
	if start >= uintptr(len(b)) {
		return nil
	}
	n := (uintptr(len(b)) - start) / unit * unit
	return b[start : start+n]
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
