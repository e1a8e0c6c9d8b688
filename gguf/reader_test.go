package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// sampleFile builds a small file that uses every value type, nested arrays,
// and tensors of several types.
func sampleFile(t testing.TB) []byte {
	t.Helper()
	w := NewWriter()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Set("general.architecture", "llama"))
	must(w.Set("general.name", "sample"))
	must(w.Set("u8", uint8(200)))
	must(w.Set("i8", int8(-100)))
	must(w.Set("u16", uint16(60000)))
	must(w.Set("i16", int16(-30000)))
	must(w.Set("llama.context_length", uint32(4096)))
	must(w.Set("i32", int32(-7)))
	must(w.Set("f32", float32(1.5)))
	must(w.Set("flag", true))
	must(w.Set("u64", uint64(1)<<40))
	must(w.Set("i64", int64(-1)<<40))
	must(w.Set("f64", math.Pi))
	must(w.Set("tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", "hello", ""}))
	must(w.Set("tokenizer.ggml.scores", []float32{0, 0, 0, -1.25, -2}))
	must(w.Set("tokenizer.ggml.token_type", []int32{2, 3, 3, 1, 1}))
	must(w.Set("bytes", []uint8{1, 2, 3}))
	must(w.Set("i8s", []int8{-1, 2}))
	must(w.Set("u16s", []uint16{1, 65535}))
	must(w.Set("i16s", []int16{-1, 2}))
	must(w.Set("u32s", []uint32{1, 4000000000}))
	must(w.Set("bools", []bool{true, false}))
	must(w.Set("u64s", []uint64{1, 1 << 63}))
	must(w.Set("i64s", []int64{-5, 5}))
	must(w.Set("f64s", []float64{0.5, -0.25}))
	inner1, _ := ValueOf([]int32{1, 2, 3})
	inner2, _ := ValueOf([]string{"a", "b"})
	must(w.Set("nested", []Value{inner1, inner2}))
	must(w.AddTensor("f32.weight", quant.F32, []int64{4, 2}, make([]byte, 32)))
	q := make([]byte, 34*2)
	for i := range q {
		q[i] = byte(i)
	}
	must(w.AddTensor("q8.weight", quant.Q8_0, []int64{64}, q))
	must(w.AddTensor("f16.weight", quant.F16, []int64{3}, []byte{1, 2, 3, 4, 5, 6}))
	b, err := w.Bytes()
	must(err)
	return b
}

func TestRoundTrip(t *testing.T) {
	b := sampleFile(t)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	md := f.Metadata
	if s, ok := md.String("general.name"); !ok || s != "sample" {
		t.Errorf("general.name = %q, %v", s, ok)
	}
	if v, ok := md.Uint32("llama.context_length"); !ok || v != 4096 {
		t.Errorf("context_length = %d, %v", v, ok)
	}
	if v, ok := md.Int32("i8"); !ok || v != -100 {
		t.Errorf("i8 as Int32 = %d, %v", v, ok)
	}
	if _, ok := md.Uint32("i8"); ok {
		t.Error("negative i8 read as a uint32")
	}
	if _, ok := md.Uint32("u64"); ok {
		t.Error("2^40 read as a uint32")
	}
	if v, ok := md.Float32("f32"); !ok || v != 1.5 {
		t.Errorf("f32 = %v, %v", v, ok)
	}
	if v, ok := md.Float64("f64"); !ok || v != math.Pi {
		t.Errorf("f64 = %v, %v", v, ok)
	}
	if v, ok := md.Bool("flag"); !ok || !v {
		t.Errorf("flag = %v, %v", v, ok)
	}
	if _, ok := md.String("llama.context_length"); ok {
		t.Error("a uint32 read as a string")
	}
	toks, ok := md.Strings("tokenizer.ggml.tokens")
	if !ok || !reflect.DeepEqual(toks, []string{"<unk>", "<s>", "</s>", "hello", ""}) {
		t.Errorf("tokens = %q, %v", toks, ok)
	}
	if sc, ok := md.Float32s("tokenizer.ggml.scores"); !ok || sc[3] != -1.25 {
		t.Errorf("scores = %v, %v", sc, ok)
	}
	if tt, ok := md.Int32s("tokenizer.ggml.token_type"); !ok || !reflect.DeepEqual(tt, []int32{2, 3, 3, 1, 1}) {
		t.Errorf("token_type = %v, %v", tt, ok)
	}
	if u, ok := md.Int32s("u16s"); !ok || !reflect.DeepEqual(u, []int32{1, 65535}) {
		t.Errorf("u16s as int32s = %v, %v", u, ok)
	}
	if _, ok := md.Int32s("u32s"); ok {
		t.Error("4e9 converted to an int32")
	}
	if u, ok := md.Uint32s("u32s"); !ok || u[1] != 4000000000 {
		t.Errorf("u32s = %v, %v", u, ok)
	}
	nested, _ := md.Lookup("nested")
	vs, ok := nested.Values()
	if !ok || len(vs) != 2 {
		t.Fatalf("nested = %v", nested)
	}
	if a, ok := vs[0].Int32s(); !ok || !reflect.DeepEqual(a, []int32{1, 2, 3}) {
		t.Errorf("nested[0] = %v", vs[0])
	}
	if a, ok := vs[1].Strings(); !ok || !reflect.DeepEqual(a, []string{"a", "b"}) {
		t.Errorf("nested[1] = %v", vs[1])
	}

	ti, ok := f.Tensor("q8.weight")
	if !ok || ti.Type != quant.Q8_0 || ti.Size != 68 || ti.Offset%32 != 0 {
		t.Fatalf("q8.weight = %+v", ti)
	}
	data, err := f.TensorData(ti)
	if err != nil || len(data) != 68 || data[67] != 67 {
		t.Fatalf("q8 data = %v, %v", data, err)
	}
	if f.DataOffset%32 != 0 {
		t.Errorf("data offset %d not aligned", f.DataOffset)
	}

	// Writing what was read gives the same file back.
	w := NewWriter()
	for k, v := range md.All() {
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors {
		d, _ := f.TensorData(ti)
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, d); err != nil {
			t.Fatal(err)
		}
	}
	b2, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Errorf("rewritten file differs (%d vs %d bytes)", len(b), len(b2))
	}
}

func TestOpenMapsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, sampleFile(t), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("f16.weight")
	d, err := f.TensorData(ti)
	if err != nil || !bytes.Equal(d, []byte{1, 2, 3, 4, 5, 6}) {
		t.Errorf("f16 data = %v, %v", d, err)
	}
	if whole := f.Bytes(); &d[0] != &whole[f.DataOffset+ti.Offset] {
		t.Error("TensorData returned a copy, not a slice of the file")
	}
	if (runtime.GOOS == "linux" || runtime.GOOS == "darwin") != f.Mapped() {
		t.Errorf("Mapped() = %v on %s", f.Mapped(), runtime.GOOS)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.TensorData(ti); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// TestOpenErrors: a file that cannot be read and one that is not GGUF
// each get an error naming the path once and matching its cause.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.gguf")
	text := filepath.Join(dir, "text.gguf")
	if err := errors.Join(os.WriteFile(empty, nil, 0o644), os.WriteFile(text, []byte("not a model at all"), 0o644)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{
		{filepath.Join(dir, "missing.gguf"), fs.ErrNotExist},
		{dir, nil}, // a directory: whatever the system says, naming it
		{empty, ErrNotGGUF},
		{text, ErrNotGGUF},
	} {
		_, err := Open(tc.path)
		if err == nil {
			t.Errorf("Open(%s) succeeded", tc.path)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("Open(%s): %v, want %v", tc.path, err, tc.want)
		}
		if n := strings.Count(err.Error(), tc.path); n != 1 {
			t.Errorf("Open(%s): %q names the path %d times, want once", tc.path, err, n)
		}
	}
}

// BenchmarkParseVocab parses a header with a 150k-entry vocabulary (the size
// of Qwen's or Llama 3's), the bulk of any real file's metadata.
func BenchmarkParseVocab(b *testing.B) {
	const n = 150_000
	toks := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i := range toks {
		toks[i] = fmt.Sprintf("tok%06d", i)
		types[i] = 1
	}
	w := NewWriter()
	if err := errors.Join(w.Set("tokenizer.ggml.tokens", toks), w.Set("tokenizer.ggml.scores", scores),
		w.Set("tokenizer.ggml.token_type", types)); err != nil {
		b.Fatal(err)
	}
	data, err := w.Bytes()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// written is the file w writes, read back.
func written(t testing.TB, w *Writer) *File {
	t.Helper()
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTensorShaped: a tensor is found with its data when its dims are the
// shape asked (trailing 1s the same shape), refused with ErrShape naming
// both shapes when not, and reported absent when the file has none.
func TestTensorShaped(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensor("v", quant.F32, []int64{4, 1}, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	f := written(t, w)
	if _, data, ok, err := f.TensorShaped("v", 4); !ok || err != nil || len(data) != 16 {
		t.Fatalf("[4]: %d bytes, %v, %v", len(data), ok, err)
	}
	if _, _, ok, err := f.TensorShaped("v", 4, 1); !ok || err != nil {
		t.Fatalf("[4 1]: %v, %v", ok, err)
	}
	if _, _, ok, err := f.TensorShaped("v", 2, 2); !ok || !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "tensor v has shape [4 1], want [2 2]") {
		t.Fatalf("[2 2]: %v, %v", ok, err)
	}
	if _, _, ok, err := f.TensorShaped("w", 4); ok || err != nil {
		t.Fatalf("absent: %v, %v", ok, err)
	}
}

// TestRewrite: a file written again keeps its keys and tensors in order
// and their values, but the keys set (in place, or after the file's own
// in key order) and the keys and tensors dropped.
func TestRewrite(t *testing.T) {
	w := NewWriter()
	for _, kv := range []struct {
		k string
		v any
	}{{"a", uint32(1)}, {"b", "two"}, {"c", true}} {
		if err := w.Set(kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"x", "y"} {
		if err := w.AddTensor(name, quant.F32, []int64{2}, []byte(name+"1234567")); err != nil {
			t.Fatal(err)
		}
	}
	f := written(t, w)
	rw, err := Rewrite(f, map[string]any{"z": int32(-1), "b": "deux", "d": float32(4)}, "c", "x")
	if err != nil {
		t.Fatal(err)
	}
	g := written(t, rw)
	var keys []string
	for _, kv := range g.Metadata.KVs() {
		keys = append(keys, kv.Key)
	}
	b2, _ := g.Metadata.String("b")
	if !reflect.DeepEqual(keys, []string{"a", "b", "d", "z"}) || b2 != "deux" || len(g.Tensors) != 1 || g.Tensors[0].Name != "y" {
		t.Fatalf("keys %v (b %q), tensors %v", keys, b2, g.Tensors)
	}
	if data, err := g.TensorData(g.Tensors[0]); err != nil || string(data) != "y1234567" {
		t.Fatalf("tensor y: %q, %v", data, err)
	}
}
