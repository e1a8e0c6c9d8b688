package wire

import (
	"encoding/binary"
	"fmt"
)

// BodyReader decodes the fixed-width little-endian fields of a frame body
// for the binary subprotocols (meshnode-stage/1, meshnode-file/1). The
// first failure sticks: later reads return zero values and Err reports
// it, so a parser reads its fields straight through and checks once.
// Every failure is a *FrameError of kind ErrInvalidMessage naming msg and
// the field.
type BodyReader struct {
	body []byte
	off  int
	msg  string
	err  error
}

// NewBodyReader reads body from off (past its kind byte), for the message
// named msg.
func NewBodyReader(body []byte, off int, msg string) BodyReader {
	return BodyReader{body: body, off: off, msg: msg}
}

// Invalid is the error for a field of msg that breaks a rule.
func Invalid(msg, field, format string, args ...any) error {
	return &FrameError{Kind: ErrInvalidMessage, Message: msg, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Fail records that field is invalid, unless a failure came first.
func (r *BodyReader) Fail(field, format string, args ...any) {
	if r.err == nil {
		r.err = Invalid(r.msg, field, format, args...)
	}
}

// Check records err (a message's own rule check), unless a failure came
// first.
func (r *BodyReader) Check(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Err is the first failure, nil if none.
func (r *BodyReader) Err() error { return r.err }

// Msg names the message being read.
func (r *BodyReader) Msg() string { return r.msg }

// Left is the bytes not yet read.
func (r *BodyReader) Left() int { return len(r.body) - r.off }

// Take returns the next n bytes, or nil after failing when fewer remain.
func (r *BodyReader) Take(field string, n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if left := uint64(r.Left()); n > left {
		r.Fail(field, "needs %d bytes, %d left in the body", n, left)
		return nil
	}
	out := r.body[r.off : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *BodyReader) U8(field string) uint8 {
	if b := r.Take(field, 1); b != nil {
		return b[0]
	}
	return 0
}

func (r *BodyReader) U16(field string) uint16 {
	if b := r.Take(field, 2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *BodyReader) U32(field string) uint32 {
	if b := r.Take(field, 4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *BodyReader) U64(field string) uint64 {
	if b := r.Take(field, 8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// Count reads a u16 or u32 count (width 2 or 4) and checks it against max
// and against the bytes left at (at least) per bytes each, before the
// caller allocates for it.
func (r *BodyReader) Count(field string, width int, max, per uint64) int {
	var n uint64
	if width == 2 {
		n = uint64(r.U16(field))
	} else {
		n = uint64(r.U32(field))
	}
	if r.err != nil {
		return 0
	}
	if n > max {
		r.Fail(field, "%d, limit %d", n, max)
		return 0
	}
	if left := uint64(r.Left()); n*per > left {
		r.Fail(field, "%d entries of %d bytes, %d bytes left", n, per, left)
		return 0
	}
	return int(n)
}

// End fails when bytes follow the last field (an encoding has one form)
// and returns the first failure.
func (r *BodyReader) End() error {
	if r.err == nil && r.off != len(r.body) {
		r.Fail("", "%d bytes after the last field", len(r.body)-r.off)
	}
	return r.err
}
