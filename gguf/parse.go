package gguf

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

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

// header is everything Parse learns before the data section.
type header struct {
	version    uint32
	md         *Metadata
	tensors    []TensorInfo
	alignment  uint64
	dataOffset uint64
}

func parseHeader(b []byte) (*header, error) {
	d := &decoder{b: b}
	d.at("header", -1)
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
		d.at("metadata key", int64(i))
		start := d.off
		key, err := d.str("key", MaxKeyLength)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, d.errAt(start, ErrCorrupt, "empty key")
		}
		d.name = key
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
		d.at("tensor", int64(i))
		t, err := d.tensorInfo(names)
		if err != nil {
			return nil, err
		}
		h.tensors = append(h.tensors, t)
	}

	d.at("data section", -1)
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
	d.name = name
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
		n, err := d.u64("dimension")
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
