package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
)

// decoder reads GGUF fields from b, bounding every length by what is left.
type decoder struct {
	b   []byte
	off int
	// The part being read, for error messages (formatted only on error):
	// section ("metadata key", "tensor", ...), its index (-1 for none) and
	// name once known.
	section string
	index   int64
	name    string
}

// at records the part being read.
func (d *decoder) at(section string, index int64) { d.section, d.index, d.name = section, index, "" }

func (d *decoder) place() string {
	s := d.section
	if d.index >= 0 {
		s += fmt.Sprintf(" %d", d.index)
	}
	if d.name != "" {
		s += fmt.Sprintf(" %q", d.name)
	}
	return s
}

func (d *decoder) errAt(off int, sentinel error, format string, args ...any) error {
	return &FormatError{Offset: int64(off), Where: d.place(), Detail: fmt.Sprintf(format, args...), Err: sentinel}
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

// need fails with ErrTruncated unless n more bytes are there; what names them.
func (d *decoder) need(n uint64, what string) error {
	if n > uint64(d.remaining()) {
		return d.errAt(d.off, ErrTruncated, "%s needs %d bytes, %d left in the file", what, n, d.remaining())
	}
	return nil
}

func (d *decoder) u32(what string) (uint32, error) {
	if err := d.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v, nil
}

func (d *decoder) u64(what string) (uint64, error) {
	if err := d.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v, nil
}

// str reads a length-prefixed string of at most max bytes.
func (d *decoder) str(what string, max int) (string, error) {
	start := d.off
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > uint64(max) {
		return "", d.errAt(start, ErrCorrupt, "%s length %d exceeds the limit of %d", what, n, max)
	}
	if n > uint64(d.remaining()) {
		return "", d.errAt(start, ErrTruncated, "%s of %d bytes runs past the end of the file (%d bytes left)", what, n, d.remaining())
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s, nil
}

// minEncodedSize is the fewest bytes one array element of type t can take.
func minEncodedSize(t ValueType) int {
	switch t {
	case TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return t.size()
}

// value decodes a value of type t; typOff is where its type tag was.
func (d *decoder) value(t ValueType, typOff int, depth int) (Value, error) {
	if t == TypeArray {
		return d.array(depth)
	}
	if !t.valid() {
		return Value{}, d.errAt(typOff, ErrCorrupt, "invalid value type %d", uint32(t))
	}
	if t == TypeString {
		s, err := d.str("string", math.MaxInt)
		return Value{kind: kindOf(TypeString), str: s}, err
	}
	n := t.size()
	if err := d.need(uint64(n), t.String()+" value"); err != nil {
		return Value{}, err
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	v := Value{kind: kindOf(t)}
	switch t {
	case TypeUint8, TypeBool:
		v.num = uint64(p[0])
		if t == TypeBool && v.num > 1 {
			v.num = 1 // llama.cpp reads any non-zero byte as true
		}
	case TypeInt8:
		v.num = uint64(int64(int8(p[0])))
	case TypeUint16:
		v.num = uint64(binary.LittleEndian.Uint16(p))
	case TypeInt16:
		v.num = uint64(int64(int16(binary.LittleEndian.Uint16(p))))
	case TypeUint32, TypeFloat32:
		v.num = uint64(binary.LittleEndian.Uint32(p))
	case TypeInt32:
		v.num = uint64(int64(int32(binary.LittleEndian.Uint32(p))))
	case TypeUint64, TypeInt64, TypeFloat64:
		v.num = binary.LittleEndian.Uint64(p)
	}
	return v, nil
}

func (d *decoder) array(depth int) (Value, error) {
	start := d.off
	if depth >= maxNesting {
		return Value{}, d.errAt(start, ErrCorrupt, "arrays nested more than %d deep", maxNesting)
	}
	et, err := d.u32("array element type")
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	if !elem.valid() {
		return Value{}, d.errAt(start, ErrCorrupt, "invalid array element type %d", et)
	}
	lenOff := d.off
	n64, err := d.u64("array length")
	if err != nil {
		return Value{}, err
	}
	if n64 > uint64(d.remaining()/minEncodedSize(elem)) {
		return Value{}, d.errAt(lenOff, ErrTruncated, "array of %d %s cannot fit in the %d bytes left", n64, elem, d.remaining())
	}
	n := int(n64)
	le := binary.LittleEndian
	sz := elem.size()
	body := d.b[d.off : d.off+n*sz] // only meaningful for fixed-size elements
	v := Value{kind: kindOf(TypeArray), elem: elem}
	switch elem {
	case TypeUint8:
		v.arr = slices.Clone(body)
	case TypeInt8:
		v.arr = decodeEach(n, func(i int) int8 { return int8(body[i]) })
	case TypeBool:
		v.arr = decodeEach(n, func(i int) bool { return body[i] != 0 })
	case TypeUint16:
		v.arr = decodeEach(n, func(i int) uint16 { return le.Uint16(body[2*i:]) })
	case TypeInt16:
		v.arr = decodeEach(n, func(i int) int16 { return int16(le.Uint16(body[2*i:])) })
	case TypeUint32:
		v.arr = decodeEach(n, func(i int) uint32 { return le.Uint32(body[4*i:]) })
	case TypeInt32:
		v.arr = decodeEach(n, func(i int) int32 { return int32(le.Uint32(body[4*i:])) })
	case TypeFloat32:
		v.arr = decodeEach(n, func(i int) float32 { return math.Float32frombits(le.Uint32(body[4*i:])) })
	case TypeUint64:
		v.arr = decodeEach(n, func(i int) uint64 { return le.Uint64(body[8*i:]) })
	case TypeInt64:
		v.arr = decodeEach(n, func(i int) int64 { return int64(le.Uint64(body[8*i:])) })
	case TypeFloat64:
		v.arr = decodeEach(n, func(i int) float64 { return math.Float64frombits(le.Uint64(body[8*i:])) })
	case TypeString:
		ss, err := d.strings(n)
		if err != nil {
			return Value{}, err
		}
		v.arr = ss
		return v, nil
	case TypeArray:
		vs := make([]Value, n)
		for i := range vs {
			if vs[i], err = d.array(depth + 1); err != nil {
				return Value{}, err
			}
		}
		v.arr = vs
		return v, nil
	}
	d.off += n * sz
	return v, nil
}

func decodeEach[T any](n int, f func(int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// strings decodes n length-prefixed strings into one shared backing string,
// so a 150k-entry vocabulary costs two allocations, not 150k.
func (d *decoder) strings(n int) ([]string, error) {
	start := d.off
	total := 0
	for i := range n {
		off := d.off
		if d.remaining() < 8 {
			return nil, d.errAt(off, ErrTruncated, "string %d length needs 8 bytes, %d left in the file", i, d.remaining())
		}
		l := binary.LittleEndian.Uint64(d.b[off:])
		d.off += 8
		if l > uint64(d.remaining()) {
			return nil, d.errAt(off, ErrTruncated, "string %d of %d bytes runs past the end of the file (%d bytes left)", i, l, d.remaining())
		}
		d.off += int(l)
		total += int(l)
	}
	var sb strings.Builder
	sb.Grow(total)
	d.off = start
	for range n {
		l := int(binary.LittleEndian.Uint64(d.b[d.off:]))
		sb.Write(d.b[d.off+8 : d.off+8+l])
		d.off += 8 + l
	}
	all := sb.String()
	out := make([]string, n)
	pos := 0
	for i, p := 0, start; i < n; i++ {
		l := int(binary.LittleEndian.Uint64(d.b[p:]))
		out[i] = all[pos : pos+l]
		pos += l
		p += 8 + l
	}
	return out, nil
}
