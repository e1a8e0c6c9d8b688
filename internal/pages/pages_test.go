package pages

import "testing"

// TestWhole: the whole units of a slice are the aligned ones it covers,
// for every start and length around a unit's edges, and none where it
// covers no whole unit.
func TestWhole(t *testing.T) {
	const unit = 64
	buf := make([]byte, 8*unit)
	base := (unit - addr(buf)%unit) % unit // buf[base] is aligned
	for off := range 2 * unit {
		for n := range 4 * unit {
			if int(base)+off+n > len(buf) {
				continue
			}
			b := buf[int(base)+off : int(base)+off+n]
			w := Whole(b, unit)
			// Expected: from the first aligned byte at or after off, as
			// many whole units as fit before off+n.
			first := (off + unit - 1) / unit * unit
			want := max(0, (off+n-first)/unit*unit)
			if len(w) != want {
				t.Fatalf("offset %d, %d bytes: %d whole bytes, want %d", off, n, len(w), want)
			}
			if want > 0 && (addr(w)%unit != 0 || addr(w) != addr(b)+uintptr(first-off)) {
				t.Fatalf("offset %d, %d bytes: whole part at %#x, want aligned at offset %d", off, n, addr(w), first-off)
			}
		}
	}
	if w := Whole(buf, 0); w != nil {
		t.Errorf("units of 0 bytes: %d bytes", len(w))
	}
}
