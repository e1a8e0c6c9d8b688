package wire

import (
	"errors"
	"strings"
	"testing"
)

// TestBodyReader: fields read little-endian in order, the first failure
// sticks (later reads give zeros) and names its message and field, counts
// are checked against their limit and the bytes left before anyone
// allocates, and trailing bytes fail End.
func TestBodyReader(t *testing.T) {
	body := []byte{9, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 3, 0, 'a', 'b', 'c'}
	r := NewBodyReader(body, 1, "Probe")
	if v := r.U16("a"); v != 0x0201 {
		t.Errorf("U16 = %#x", v)
	}
	if v := r.U32("b"); v != 0x06050403 {
		t.Errorf("U32 = %#x", v)
	}
	if v := r.U8("c"); v != 7 {
		t.Errorf("U8 = %d", v)
	}
	if n := r.Count("n", 2, 8, 1); n != 3 || string(r.Take("text", uint64(n))) != "abc" {
		t.Errorf("Count = %d", n)
	}
	if err := r.End(); err != nil {
		t.Fatalf("End: %v", err)
	}

	for _, tc := range []struct {
		name  string
		read  func(r *BodyReader)
		field string
		why   string
	}{
		{"short", func(r *BodyReader) { r.U64("wide") }, "wide", "needs 8 bytes"},
		{"over the limit", func(r *BodyReader) { r.Count("n", 2, 2, 1) }, "n", "limit 2"},
		{"more than the bytes left", func(r *BodyReader) { r.Count("n", 2, 1000, 4) }, "n", "entries of 4 bytes"},
		{"trailing bytes", func(r *BodyReader) { r.U16("a"); r.End() }, "", "bytes after the last field"},
		{"first failure sticks", func(r *BodyReader) { r.Fail("x", "first"); r.U64("wide"); r.Check(errors.New("later")) }, "x", "first"},
	} {
		r := NewBodyReader([]byte{5, 0, 1}, 0, "Probe")
		tc.read(&r)
		var fe *FrameError
		if err := r.Err(); !errors.As(err, &fe) || !errors.Is(err, ErrInvalidMessage) || fe.Message != "Probe" || fe.Field != tc.field || !strings.Contains(fe.Reason, tc.why) {
			t.Errorf("%s: %v, want Probe.%s: %s", tc.name, err, tc.field, tc.why)
		}
		if r.U16("after") != 0 {
			t.Errorf("%s: a read after the failure gave data", tc.name)
		}
	}
}
