package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/meshnode/meshnode/gguf/quant"
)

// Writer builds a GGUF file: metadata, then tensors, each laid out at the
// next aligned offset in the order added. It is for tests and tools; it holds
// the tensor data it is given until WriteTo.
type Writer struct {
	// Version is the GGUF version written (3 unless set to 2; the layouts are
	// the same).
	Version uint32

	md      *Metadata
	tensors []TensorInfo
	data    [][]byte
	names   map[string]bool
}

// NewWriter returns an empty GGUF v3 writer.
func NewWriter() *Writer {
	return &Writer{Version: 3, md: &Metadata{index: map[string]int{}}, names: map[string]bool{}}
}

// Set adds the metadata key with a value ValueOf accepts. A key can be set
// once; general.alignment must be a uint32 power of two.
func (w *Writer) Set(key string, value any) error {
	v, err := ValueOf(value)
	if err != nil {
		return fmt.Errorf("gguf: key %q: %w", key, err)
	}
	if len(key) > MaxKeyLength {
		return fmt.Errorf("gguf: key of %d bytes is longer than %d", len(key), MaxKeyLength)
	}
	if key == KeyAlignment {
		a, ok := v.Interface().(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("gguf: %s must be a uint32 power of two, got %v", KeyAlignment, v)
		}
	}
	return w.md.add(KV{key, v})
}

// Rewrite is a Writer holding f again, metadata and tensors in f's order,
// with the keys in set given their values there (a key f lacks added
// after f's own, in key order) and the keys and tensors drop names left
// out; more can be added before it is written. It is how a test or a
// fixture derives one model file from another.
func Rewrite(f *File, set map[string]any, drop ...string) (*Writer, error) {
	w := NewWriter()
	dropped := make(map[string]bool, len(drop))
	for _, d := range drop {
		dropped[d] = true
	}
	for _, kv := range f.Metadata.KVs() {
		var v any = kv.Value
		if nv, ok := set[kv.Key]; ok {
			v = nv
		}
		if !dropped[kv.Key] {
			if err := w.Set(kv.Key, v); err != nil {
				return nil, err
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if _, had := f.Metadata.Lookup(k); !had && !dropped[k] {
			if err := w.Set(k, set[k]); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range f.Tensors {
		if dropped[t.Name] {
			continue
		}
		data, err := f.TensorData(t)
		if err != nil {
			return nil, err
		}
		if err := w.AddTensor(t.Name, t.Type, t.Dims, data); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// AddTensor appends a tensor. dims is ggml's ne (row length first); data must
// be exactly the tensor's size in typ.
func (w *Writer) AddTensor(name string, typ quant.Type, dims []int64, data []byte) error {
	if name == "" || len(name) > MaxTensorName {
		return fmt.Errorf("gguf: tensor name %q must be 1 to %d bytes", name, MaxTensorName)
	}
	if w.names[name] {
		return fmt.Errorf("gguf: duplicate tensor %q", name)
	}
	if !typ.Known() {
		return fmt.Errorf("gguf: tensor %q: unknown type %d", name, uint32(typ))
	}
	if len(dims) > MaxDims {
		return fmt.Errorf("gguf: tensor %q: %d dimensions, at most %d", name, len(dims), MaxDims)
	}
	t := TensorInfo{Name: name, Type: typ, Dims: append([]int64(nil), dims...)}
	n := int64(1)
	for _, d := range dims {
		if d < 0 || (d > 0 && n > math.MaxInt64/d) {
			return fmt.Errorf("gguf: tensor %q: bad shape %v", name, dims)
		}
		n *= d
	}
	if t.RowLen()%int64(typ.BlockSize()) != 0 {
		return fmt.Errorf("gguf: tensor %q: row length %d is not a multiple of the %s block size %d", name, t.RowLen(), typ, typ.BlockSize())
	}
	t.Size = uint64(n / int64(typ.BlockSize()) * int64(typ.TypeSize()))
	if uint64(len(data)) != t.Size {
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, shape %v of %s needs %d", name, len(data), dims, typ, t.Size)
	}
	w.names[name] = true
	w.tensors = append(w.tensors, t)
	w.data = append(w.data, data)
	return nil
}

func (w *Writer) alignment() uint64 {
	if a, ok := w.md.Uint32(KeyAlignment); ok {
		return uint64(a)
	}
	return DefaultAlignment
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(out, 1<<16)
	cw := &countWriter{w: bw}
	e := &encoder{w: cw}
	align := w.alignment()

	e.raw([]byte(Magic))
	e.u32(w.Version)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(w.md.Len()))
	for _, kv := range w.md.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ()))
		e.value(kv.Value)
	}
	var off uint64
	for i := range w.tensors {
		t := &w.tensors[i]
		t.Offset = off
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(uint64(d))
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
		off = alignUp(off+t.Size, align)
	}
	if len(w.tensors) > 0 {
		e.pad(align)
	}
	for i, t := range w.tensors {
		e.raw(w.data[i])
		if i < len(w.tensors)-1 {
			e.pad(align)
		} else {
			// The data section ends padded too, as llama.cpp writes it.
			e.zeros(alignUp(t.Size, align) - t.Size)
		}
	}
	if e.err == nil {
		e.err = bw.Flush()
	}
	return cw.n, e.err
}

// Bytes returns the encoded file.
func (w *Writer) Bytes() ([]byte, error) {
	var b bytes.Buffer
	_, err := w.WriteTo(&b)
	return b.Bytes(), err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encoder appends little-endian GGUF encodings, remembering the first error.
type encoder struct {
	w   *countWriter
	buf [8]byte
	err error
}

func (e *encoder) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *encoder) u8(v uint8) { e.buf[0] = v; e.raw(e.buf[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], v)
	e.raw(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], v)
	e.raw(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], v)
	e.raw(e.buf[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}

var zeroPage [4096]byte

func (e *encoder) zeros(n uint64) {
	for n > 0 {
		k := min(n, uint64(len(zeroPage)))
		e.raw(zeroPage[:k])
		n -= k
	}
}

func (e *encoder) pad(align uint64) {
	n := uint64(e.w.n)
	e.zeros(alignUp(n, align) - n)
}

// scalar writes the low bytes of a scalar's bits.
func (e *encoder) scalar(t ValueType, num uint64) {
	switch t.size() {
	case 1:
		e.u8(uint8(num))
	case 2:
		e.u16(uint16(num))
	case 4:
		e.u32(uint32(num))
	case 8:
		e.u64(num)
	}
}

func (e *encoder) value(v Value) {
	switch v.typ() {
	case TypeString:
		e.str(v.str)
	case TypeArray:
		e.array(v)
	default:
		e.scalar(v.typ(), v.num)
	}
}

func (e *encoder) array(v Value) {
	e.u32(uint32(v.elem))
	e.u64(uint64(v.Len()))
	switch a := v.arr.(type) {
	case []string:
		for _, s := range a {
			e.str(s)
		}
	case []Value:
		for _, x := range a {
			e.array(x)
		}
	case []uint8:
		e.raw(a)
	case []bool:
		for _, b := range a {
			if b {
				e.u8(1)
			} else {
				e.u8(0)
			}
		}
	case []float32:
		for _, f := range a {
			e.u32(math.Float32bits(f))
		}
	case []float64:
		for _, f := range a {
			e.u64(math.Float64bits(f))
		}
	default:
		for i := range v.Len() {
			e.scalar(v.elem, v.index(i))
		}
	}
}
