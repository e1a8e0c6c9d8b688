package journal

import (
	"bytes"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

// FuzzDecodeRecord: the line decoder never panics, and a line it accepts
// is exactly the journal's encoding of what it decoded.
func FuzzDecodeRecord(f *testing.F) {
	prev := receipt.ContentID{1}
	for i, e := range serves() {
		p := &prev
		if i == 0 {
			p = nil
		}
		line, err := encodeRecord(uint64(i), p, e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(line)
	}
	rev, err := encodeRecord(7, &prev, Entry{Revoked: &Revoked{Grant: receipt.ContentID{9}, At: 1_700_000_000_000_000_000}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rev)
	f.Add([]byte(`{"seq":0,"entry":{}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := DecodeRecord(line)
		if err != nil {
			return
		}
		again, err := encodeRecord(r.Seq, r.Prev, r.Entry)
		if err != nil || !bytes.Equal(again, line) || r.Hash != receipt.Sum(line) {
			t.Fatalf("accepted %q; re-encodes as %q (%v)", line, again, err)
		}
	})
}

// FuzzDecodeSlot: a checkpoint slot read from disk never panics the
// decoder, and one it accepts is exactly the encoding of what it decoded.
func FuzzDecodeSlot(f *testing.F) {
	f.Add(encodeSlot(1, Checkpoint{}))
	f.Add(encodeSlot(42, Checkpoint{Records: 9, Size: 6976, Head: receipt.ContentID{7}}))
	f.Add(make([]byte, slotLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		gen, c, ok := decodeSlot(b)
		if !ok {
			return
		}
		if again := encodeSlot(gen, c); !bytes.Equal(again, b[:slotLen]) {
			t.Fatalf("accepted %x; re-encodes as %x", b[:slotLen], again)
		}
	})
}
