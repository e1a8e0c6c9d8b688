package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/meshnode/meshnode/gguf/quant"
)

// Format constants.
const (
	Magic            = "GGUF"
	DefaultAlignment = 32
	// MaxDims is the most dimensions a tensor may have (GGML_MAX_DIMS).
	MaxDims = 4
	// MaxTensorName is the longest tensor name the format allows (ggml keeps
	// names in a 64-byte buffer).
	MaxTensorName = 63
	// MaxKeyLength bounds metadata keys (the GGUF spec's 65535).
	MaxKeyLength = 65535
	// maxNesting bounds arrays of arrays.
	maxNesting = 8

	KeyAlignment = "general.alignment"
)

// TensorInfo is one entry of the tensor index.
type TensorInfo struct {
	Name string
	Type quant.Type
	// Dims is ggml's ne: Dims[0] is the row length (the fastest-varying
	// dimension), Dims[1] the number of rows, and so on.
	Dims []int64
	// Offset is the tensor's offset from the start of the data section.
	Offset uint64
	// Size is the tensor's size in bytes.
	Size uint64
}

// Elements is the number of elements (the product of Dims).
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// RowLen is the number of elements in one row (Dims[0]).
func (t TensorInfo) RowLen() int64 {
	if len(t.Dims) == 0 {
		return 1
	}
	return t.Dims[0]
}

// Rows is the number of rows: Elements / RowLen.
func (t TensorInfo) Rows() int64 {
	if t.RowLen() == 0 {
		return 0
	}
	return t.Elements() / t.RowLen()
}

// RowSize is the size of one row in bytes.
func (t TensorInfo) RowSize() int64 {
	return t.RowLen() / int64(t.Type.BlockSize()) * int64(t.Type.TypeSize())
}

// header is everything Parse learns before the data section.
type header struct {
	version    uint32
	md         *Metadata
	tensors    []TensorInfo
	alignment  uint64
	dataOffset uint64
}

type decoder struct {
	b     []byte
	off   int
	where string
}

func (d *decoder) errAt(off int, sentinel error, format string, args ...any) error {
	return &FormatError{Offset: int64(off), Where: d.where, Detail: fmt.Sprintf(format, args...), Err: sentinel}
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

func parseHeader(b []byte) (*header, error) {
	d := &decoder{b: b, where: "header"}
	if len(b) < 4 || string(b[:4]) != Magic {
		n := min(len(b), 4)
		return nil, d.errAt(0, ErrNotGGUF, "magic is %q, want %q", b[:n], Magic)
	}
	d.off = 4
	h := &header{alignment: DefaultAlignment}
	var err error
	if h.version, err = d.u32("version"); err != nil {
		return nil, err
	}
	switch {
	case h.version == 2 || h.version == 3:
	case h.version == 1:
		return nil, d.errAt(4, ErrVersion, "GGUF v1 is not supported (only v2 and v3)")
	case h.version&0xFFFF == 0 && h.version != 0:
		return nil, d.errAt(4, ErrVersion, "version %#x looks byte-swapped: big-endian GGUF is not supported", h.version)
	default:
		return nil, d.errAt(4, ErrVersion, "version %d is not supported (only v2 and v3)", h.version)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Each key-value pair takes at least 8+1+4+1 bytes and each tensor
	// entry 8+1+4+4+8, so counts beyond that are false before any allocation.
	if nKV > uint64(d.remaining())/14 {
		return nil, d.errAt(16, ErrTruncated, "metadata count %d cannot fit in the %d bytes left", nKV, d.remaining())
	}
	if nTensors > uint64(d.remaining())/25 {
		return nil, d.errAt(8, ErrTruncated, "tensor count %d cannot fit in the %d bytes left", nTensors, d.remaining())
	}

	kvs := make([]KV, 0, nKV)
	h.md = &Metadata{index: make(map[string]int, nKV)}
	for i := range nKV {
		d.where = fmt.Sprintf("metadata key %d", i)
		start := d.off
		key, err := d.str("key", MaxKeyLength)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, d.errAt(start, ErrCorrupt, "empty key")
		}
		d.where = fmt.Sprintf("metadata key %d %q", i, key)
		if _, dup := h.md.index[key]; dup {
			return nil, d.errAt(start, ErrCorrupt, "duplicate key")
		}
		typOff := d.off
		t, err := d.u32("value type")
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(t), typOff, 0)
		if err != nil {
			return nil, err
		}
		if key == KeyAlignment {
			a, ok := v.Interface().(uint32)
			if !ok {
				return nil, d.errAt(typOff, ErrCorrupt, "alignment must be a uint32, is a %s", v.typ())
			}
			if a == 0 || a&(a-1) != 0 {
				return nil, d.errAt(typOff, ErrCorrupt, "alignment %d is not a power of two", a)
			}
			h.alignment = uint64(a)
		}
		h.md.index[key] = len(kvs)
		kvs = append(kvs, KV{key, v})
	}
	h.md.kvs = kvs

	h.tensors = make([]TensorInfo, 0, nTensors)
	names := make(map[string]struct{}, nTensors)
	for i := range nTensors {
		d.where = fmt.Sprintf("tensor %d", i)
		t, err := d.tensorInfo(names)
		if err != nil {
			return nil, err
		}
		h.tensors = append(h.tensors, t)
	}

	d.where = "data section"
	h.dataOffset = uint64(d.off)
	if nTensors > 0 {
		h.dataOffset = alignUp(h.dataOffset, h.alignment)
		if h.dataOffset > uint64(len(b)) {
			return nil, d.errAt(d.off, ErrTruncated, "data section starts at %d, past the end of the %d-byte file", h.dataOffset, len(b))
		}
	}
	if err := checkTensorLayout(h, uint64(len(b))); err != nil {
		return nil, err
	}
	return h, nil
}

func (d *decoder) tensorInfo(names map[string]struct{}) (TensorInfo, error) {
	var t TensorInfo
	start := d.off
	name, err := d.str("name", MaxTensorName)
	if err != nil {
		return t, err
	}
	if name == "" {
		return t, d.errAt(start, ErrCorrupt, "empty tensor name")
	}
	d.where += fmt.Sprintf(" %q", name)
	if _, dup := names[name]; dup {
		return t, d.errAt(start, ErrCorrupt, "duplicate tensor name")
	}
	names[name] = struct{}{}
	t.Name = name

	dimsOff := d.off
	nDims, err := d.u32("dimension count")
	if err != nil {
		return t, err
	}
	if nDims > MaxDims {
		return t, d.errAt(dimsOff, ErrCorrupt, "%d dimensions, at most %d allowed", nDims, MaxDims)
	}
	t.Dims = make([]int64, nDims)
	elems := uint64(1)
	overflow, zero := false, false
	for j := range t.Dims {
		off := d.off
		n, err := d.u64(fmt.Sprintf("dimension %d", j))
		if err != nil {
			return t, err
		}
		if n > math.MaxInt64 {
			return t, d.errAt(off, ErrCorrupt, "dimension %d is negative (%d)", j, int64(n))
		}
		t.Dims[j] = int64(n)
		hi, lo := bits.Mul64(elems, n)
		if hi != 0 || lo > math.MaxInt64 {
			overflow = true
		}
		elems, zero = lo, zero || n == 0
	}
	if zero {
		elems = 0 // an empty tensor, however large its other dimensions
	} else if overflow {
		return t, d.errAt(dimsOff, ErrCorrupt, "shape %v has more than 2^63 elements", t.Dims)
	}

	typOff := d.off
	typ, err := d.u32("type")
	if err != nil {
		return t, err
	}
	t.Type = quant.Type(typ)
	if !t.Type.Known() {
		return t, d.errAt(typOff, ErrCorrupt, "unknown ggml type %d", typ)
	}
	bs := uint64(t.Type.BlockSize())
	if rowLen := uint64(t.RowLen()); rowLen%bs != 0 {
		return t, d.errAt(dimsOff, ErrCorrupt, "row length %d is not a multiple of the %s block size %d", rowLen, t.Type, bs)
	}
	if elems != 0 {
		hi, size := bits.Mul64(elems/bs, uint64(t.Type.TypeSize()))
		if hi != 0 {
			return t, d.errAt(dimsOff, ErrCorrupt, "shape %v of %s is more than 2^64 bytes", t.Dims, t.Type)
		}
		t.Size = size
	}
	if t.Offset, err = d.u64("data offset"); err != nil {
		return t, err
	}
	return t, nil
}

// checkTensorLayout holds every tensor to an aligned, in-bounds,
// non-overlapping place in the data section.
func checkTensorLayout(h *header, fileSize uint64) error {
	avail := fileSize - h.dataOffset
	order := make([]int, len(h.tensors))
	for i := range order {
		order[i] = i
	}
	for _, t := range h.tensors {
		if t.Offset%h.alignment != 0 {
			return &FormatError{Offset: int64(h.dataOffset), Where: fmt.Sprintf("tensor %q", t.Name), Err: ErrCorrupt,
				Detail: fmt.Sprintf("data offset %d is not a multiple of the alignment %d", t.Offset, h.alignment)}
		}
		if t.Offset > avail || t.Size > avail-t.Offset {
			return &FormatError{Offset: int64(h.dataOffset), Where: fmt.Sprintf("tensor %q", t.Name), Err: ErrTruncated,
				Detail: fmt.Sprintf("data [%d, +%d) runs past the end of the %d-byte data section", t.Offset, t.Size, avail)}
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := h.tensors[a], h.tensors[b]
		if ta.Offset != tb.Offset {
			if ta.Offset < tb.Offset {
				return -1
			}
			return 1
		}
		return int(int64(ta.Size) - int64(tb.Size))
	})
	for k := 1; k < len(order); k++ {
		p, q := h.tensors[order[k-1]], h.tensors[order[k]]
		if p.Size > 0 && q.Size > 0 && p.Offset+p.Size > q.Offset {
			return &FormatError{Offset: int64(h.dataOffset + q.Offset), Where: fmt.Sprintf("tensor %q", q.Name), Err: ErrCorrupt,
				Detail: fmt.Sprintf("data overlaps tensor %q", p.Name)}
		}
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }

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
	case TypeUint32:
		v.num = uint64(binary.LittleEndian.Uint32(p))
	case TypeInt32:
		v.num = uint64(int64(int32(binary.LittleEndian.Uint32(p))))
	case TypeFloat32:
		v.num = math.Float64bits(float64(math.Float32frombits(binary.LittleEndian.Uint32(p))))
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
		l, err := d.u64(fmt.Sprintf("string %d length", i))
		if err != nil {
			return nil, err
		}
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
