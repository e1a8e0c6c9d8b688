package gguf

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// raw assembles GGUF bytes field by field, so tests can write what the
// Writer refuses to.
type raw []byte

func (r raw) u32(v uint32) raw    { return binary.LittleEndian.AppendUint32(r, v) }
func (r raw) u64(v uint64) raw    { return binary.LittleEndian.AppendUint64(r, v) }
func (r raw) str(s string) raw    { return append(r.u64(uint64(len(s))), s...) }
func (r raw) bytes(b ...byte) raw { return append(r, b...) }
func (r raw) pad(a int) raw {
	for len(r)%a != 0 {
		r = append(r, 0)
	}
	return r
}

func rawHeader(version uint32, nTensors, nKV uint64) raw {
	return raw("GGUF").u32(version).u64(nTensors).u64(nKV)
}

// kvU32 is one metadata pair holding a uint32.
func (r raw) kvU32(key string, v uint32) raw { return r.str(key).u32(uint32(TypeUint32)).u32(v) }

// tensor is one tensor-index entry.
func (r raw) tensor(name string, typ quant.Type, offset uint64, dims ...uint64) raw {
	r = r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r = r.u64(d)
	}
	return r.u32(uint32(typ)).u64(offset)
}

func nested(depth int) raw {
	r := raw(nil)
	for range depth {
		r = r.u32(uint32(TypeArray)).u64(1)
	}
	return r.u32(uint32(TypeUint8)).u64(0)
}

func TestCorruptFiles(t *testing.T) {
	oneTensor := func(typ quant.Type, offset uint64, dims ...uint64) raw {
		r := rawHeader(3, 1, 0).tensor("w", typ, offset, dims...).pad(32)
		return append(r, make([]byte, 64)...)
	}
	cases := []struct {
		name   string
		file   []byte
		want   error
		detail string // a substring of the message
	}{
		{"empty", nil, ErrNotGGUF, "magic"},
		{"bad magic", raw("GGML").u32(3), ErrNotGGUF, `"GGML"`},
		{"v1", rawHeader(1, 0, 0), ErrVersion, "v1"},
		{"big-endian", raw("GGUF").u32(0x03000000).u64(0).u64(0), ErrVersion, "big-endian"},
		{"v4", rawHeader(4, 0, 0), ErrVersion, "version 4"},
		{"no counts", raw("GGUF").u32(3), ErrTruncated, "tensor count"},
		{"huge kv count", rawHeader(3, 0, 1<<62), ErrTruncated, "metadata count"},
		{"huge tensor count", rawHeader(3, 1<<40, 0), ErrTruncated, "tensor count"},
		{"key too long", rawHeader(3, 0, 1).u64(1<<40).bytes(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14), ErrCorrupt, "limit"},
		{"key past end", rawHeader(3, 0, 1).u64(30).bytes(make([]byte, 14)...), ErrTruncated, "key"},
		{"empty key", rawHeader(3, 0, 1).str("").u32(uint32(TypeUint8)).bytes(0, 0, 0, 0, 0), ErrCorrupt, "empty key"},
		{"duplicate key", rawHeader(3, 0, 2).kvU32("a", 1).kvU32("a", 2), ErrCorrupt, "duplicate"},
		{"bad value type", rawHeader(3, 0, 1).str("k").u32(13).u32(0).u64(0), ErrCorrupt, "invalid value type 13"},
		{"string past end", rawHeader(3, 0, 1).str("k").u32(uint32(TypeString)).u64(100).bytes(1, 2), ErrTruncated, "string"},
		{"bad array type", rawHeader(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(77).u64(0), ErrCorrupt, "element type 77"},
		{"huge array", rawHeader(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(1 << 61), ErrTruncated, "array of"},
		{"huge string array", rawHeader(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(1 << 20), ErrTruncated, "array of"},
		{"too deep", append(rawHeader(3, 0, 1).str("k").u32(uint32(TypeArray)), nested(maxNesting)...), ErrCorrupt, "nested"},
		{"alignment type", rawHeader(3, 0, 1).str(KeyAlignment).u32(uint32(TypeUint64)).u64(32), ErrCorrupt, "uint32"},
		{"alignment 48", rawHeader(3, 0, 1).kvU32(KeyAlignment, 48), ErrCorrupt, "power of two"},
		{"alignment 0", rawHeader(3, 0, 1).kvU32(KeyAlignment, 0), ErrCorrupt, "power of two"},
		{"name too long", rawHeader(3, 1, 0).tensor(strings.Repeat("n", 64), quant.F32, 0, 1), ErrCorrupt, "name length 64"},
		{"duplicate tensor", rawHeader(3, 2, 0).tensor("w", quant.F32, 0, 1).tensor("w", quant.F32, 32, 1), ErrCorrupt, "duplicate tensor"},
		{"five dims", rawHeader(3, 1, 0).tensor("w", quant.F32, 0, 1, 1, 1, 1, 1), ErrCorrupt, "5 dimensions"},
		{"negative dim", rawHeader(3, 1, 0).tensor("w", quant.F32, 0, 1<<63), ErrCorrupt, "negative"},
		{"element overflow", rawHeader(3, 1, 0).tensor("w", quant.F32, 0, 1<<32, 1<<32), ErrCorrupt, "2^63"},
		{"removed type", oneTensor(quant.Type(4), 0, 32), ErrCorrupt, "unknown ggml type 4"},
		{"unknown type", oneTensor(quant.Type(99), 0, 32), ErrCorrupt, "unknown ggml type 99"},
		{"ragged block", oneTensor(quant.Q8_0, 0, 33), ErrCorrupt, "not a multiple"},
		{"misaligned", oneTensor(quant.F32, 4, 4), ErrCorrupt, "alignment"},
		{"data past end", oneTensor(quant.F32, 0, 17), ErrTruncated, "past the end"},
		{"offset past end", oneTensor(quant.F32, 1<<40, 1), ErrTruncated, "past the end"},
		{"overlap", append(rawHeader(3, 2, 0).tensor("a", quant.F32, 0, 16).tensor("b", quant.F32, 32, 4).pad(32), make([]byte, 96)...),
			ErrCorrupt, "overlaps"},
		{"no data section", rawHeader(3, 1, 0).tensor("w", quant.F32, 0, 4), ErrTruncated, "past the end"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.file)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v is not a *FormatError", err)
			}
			if !strings.Contains(err.Error(), c.detail) {
				t.Errorf("message %q does not mention %q", err, c.detail)
			}
			if fe.Offset < 0 || fe.Offset > int64(len(c.file)) {
				t.Errorf("offset %d outside the %d-byte file", fe.Offset, len(c.file))
			}
		})
	}
}

func TestErrorNamesPlace(t *testing.T) {
	f := rawHeader(3, 0, 2).kvU32("general.alignment", 32).str("tokenizer.ggml.tokens").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(3).str("a").u64(50)
	lengthAt := len(f) - 8
	f = append(f, make([]byte, 20)...)
	_, err := Parse(f)
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatal(err)
	}
	if !strings.Contains(fe.Where, `metadata key 1 "tokenizer.ggml.tokens"`) || !strings.Contains(fe.Detail, "string 1") {
		t.Errorf("error %q does not say which key and element", err)
	}
	if want := int64(lengthAt); fe.Offset != want {
		t.Errorf("offset %d, want %d (the string's length field)", fe.Offset, want)
	}
}

// TestTruncatedPrefixes cuts a valid file at every length short of its last
// tensor byte: each must fail with a sentinel error, none may panic.
func TestTruncatedPrefixes(t *testing.T) {
	b := sampleFile(t)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	end := f.DataOffset
	for _, ti := range f.Tensors {
		end = max(end, f.DataOffset+ti.Offset+ti.Size)
	}
	for n := range int(end) {
		_, err := Parse(b[:n])
		if err == nil {
			t.Fatalf("prefix of %d bytes (of %d) parsed", n, len(b))
		}
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrNotGGUF) {
			t.Fatalf("prefix of %d bytes: %v, want ErrTruncated", n, err)
		}
	}
}

func TestVersion2(t *testing.T) {
	w := NewWriter()
	w.Version = 2
	if err := w.Set("general.architecture", "llama"); err != nil {
		t.Fatal(err)
	}
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(b)
	if err != nil || f.Version != 2 {
		t.Fatalf("v2: %v, version %d", err, f.Version)
	}
}

func TestCustomAlignment(t *testing.T) {
	w := NewWriter()
	if err := w.Set(KeyAlignment, uint32(64)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := w.AddTensor(name, quant.F32, []int64{3}, make([]byte, 12)); err != nil {
			t.Fatal(err)
		}
	}
	f := written(t, w)
	tb, _ := f.Tensor("b")
	if f.Alignment != 64 || f.DataOffset%64 != 0 || tb.Offset != 64 {
		t.Errorf("alignment %d, data at %d, b at %d", f.Alignment, f.DataOffset, tb.Offset)
	}
	if err := w.Set("x", uint8(1)); err != nil {
		t.Fatal(err)
	}
	if err := NewWriter().Set(KeyAlignment, uint32(3)); err == nil {
		t.Error("Writer accepted alignment 3")
	}
}
