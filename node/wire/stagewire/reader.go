package stagewire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/node/wire"
)

// reader decodes a body's fixed-width fields. The first failure sticks:
// later reads return zero values and end reports it, so a parser reads
// its fields straight through and checks once.
type reader struct {
	b   []byte
	off int
	msg string
	err error
}

func (r *reader) fail(field, format string, args ...any) {
	if r.err == nil {
		r.err = &wire.FrameError{Kind: wire.ErrInvalidMessage, Message: r.msg, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
}

// take returns the next n bytes, or nil after failing when fewer remain.
func (r *reader) take(field string, n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if left := uint64(len(r.b) - r.off); n > left {
		r.fail(field, "needs %d bytes, %d left in the body", n, left)
		return nil
	}
	out := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *reader) u8(field string) uint8 {
	if b := r.take(field, 1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16(field string) uint16 {
	if b := r.take(field, 2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if b := r.take(field, 4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64(field string) uint64 {
	if b := r.take(field, 8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) id(field string) (id [32]byte) {
	copy(id[:], r.take(field, 32))
	return id
}

// nonzero is u64 for an id that 0 may not take (stage and request ids).
func (r *reader) nonzero(field string) uint64 {
	v := r.u64(field)
	if v == 0 && r.err == nil {
		r.fail(field, "zero")
	}
	return v
}

// count reads a u16 or u32 count (width 2 or 4) and checks it against max
// and against the bytes left at per bytes each, before the caller
// allocates for it.
func (r *reader) count(field string, width int, max, per uint64) int {
	var n uint64
	if width == 2 {
		n = uint64(r.u16(field))
	} else {
		n = uint64(r.u32(field))
	}
	if r.err != nil {
		return 0
	}
	if n > max {
		r.fail(field, "%d, limit %d", n, max)
		return 0
	}
	if left := uint64(len(r.b) - r.off); n*per > left {
		r.fail(field, "%d entries of %d bytes, %d bytes left", n, per, left)
		return 0
	}
	return int(n)
}

// end fails when bytes follow the last field: an encoding has one form.
func (r *reader) end() error {
	if r.err == nil && r.off != len(r.b) {
		r.fail("", "%d bytes after the last field", len(r.b)-r.off)
	}
	return r.err
}

func invalid(msg, field, format string, args ...any) error {
	return &wire.FrameError{Kind: wire.ErrInvalidMessage, Message: msg, Field: field, Reason: fmt.Sprintf(format, args...)}
}

func putU32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }

var le = binary.LittleEndian

func appendF32s(dst []byte, xs []float32) []byte {
	for _, x := range xs {
		dst = le.AppendUint32(dst, math.Float32bits(x))
	}
	return dst
}

func readF32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
	}
	return out
}
