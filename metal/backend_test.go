package metal_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/backend/backendtest"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/metal"
	"github.com/meshnode/meshnode/metal/metalemu"
	"github.com/meshnode/meshnode/metal/mtl"
)

// TestNewWithoutDevice: where Metal cannot open (every system but
// darwin/arm64; a Mac without a device), New says so with ErrNoDevice.
func TestNewWithoutDevice(t *testing.T) {
	if _, err := mtl.SystemDefault(); err == nil {
		t.Skip("this machine has a Metal device")
	}
	_, err := metal.New(metal.Options{})
	if !errors.Is(err, metal.ErrNoDevice) || !errors.Is(err, mtl.ErrUnavailable) || !strings.Contains(err.Error(), "Metal unavailable") {
		t.Fatalf("New without Metal: %v", err)
	}
}

// TestMemory: buffers of dropped tensors are released at the next sync,
// a buffer the device refuses is an error where the interface has one,
// and Close releases everything.
func TestMemory(t *testing.T) {
	be, d := newEmu(t, emuConfig)
	base := d.Live()
	func() {
		for range 20 {
			be.NewTensor(64, 64)
		}
	}()
	if d.Live() < base+20 {
		t.Fatalf("%d buffers after making 20 tensors from %d", d.Live(), base)
	}
	settle()
	keep := be.NewTensor(1, 4)
	be.Read(make([]float32, 4), keep) // a sync: released buffers go
	if got := d.Live(); got > base+1 {
		t.Errorf("%d buffers after dropping the tensors, want %d", got, base+1)
	}

	d.SetMemory(1 << 20)
	defer d.SetMemory(0)
	_, err := be.NewKVCache(quant.F16, 4096, []backend.KVShape{{KVHeads: 8, HeadDimK: 128, HeadDimV: 128}})
	if err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("a KV cache beyond the device's memory: %v", err)
	}
	_, err = be.Weight(quant.F32, 1024, 1024, make([]byte, 4<<20))
	if err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("a weight beyond the device's memory: %v", err)
	}
	if _, err := be.Weight(quant.TQ2_0, 1, 256, make([]byte, 66)); !errors.Is(err, metal.ErrType) {
		t.Errorf("a type without kernels: %v", err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.Live(); n != 0 {
		t.Errorf("%d buffers outlive Close", n)
	}
	defer func() {
		if recover() == nil {
			t.Error("a backend used after Close did not panic")
		}
	}()
	be.NewTensor(1, 1)
}

// TestMapFileViews: a model file is read in place through no-copy
// buffers; one larger than the device's maxBufferLength becomes
// overlapping views, every tensor inside one, with the CPU's logits.
func TestMapFileViews(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Skip(err)
	}
	b, err := modeltest.Generate(modeltest.Fixture("llama", "Q4_0"), md)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	want, _ := greedy(t, ref, f, 3)
	largest := largestTensor(f)
	pg := os.Getpagesize()
	for _, c := range []struct {
		name      string
		maxBuffer int
		views     int
	}{
		{"one view", 0, 1},
		// Overlap (the largest tensor, in pages) plus a third of the file.
		{"split", (largest + 2*pg + len(f.Bytes())/3) &^ (pg - 1), 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			be, _ := newEmu(t, metalemu.Config{MaxBufferLength: c.maxBuffer})
			defer be.Close()
			got, _ := greedy(t, be, f, 3) // maps f (decode)
			info, st := be.Info(), be.Stats()
			if st.CopiedBytes != 0 || info.Views != c.views {
				t.Errorf("%d views, %d bytes copied; want %d views and none", info.Views, st.CopiedBytes, c.views)
			}
			t.Logf("%d views of at most %d bytes over %d", info.Views, info.MaxBufferLength, len(f.Bytes()))
			for step := range want {
				if !slices.Equal(got[step], want[step]) {
					t.Fatalf("step %d: logits from mapped weights differ from the CPU's", step)
				}
			}
		})
	}
	// A tensor larger than any buffer cannot be mapped.
	be, _ := newEmu(t, metalemu.Config{MaxBufferLength: 4 * pg})
	defer be.Close()
	if err := be.MapFile(f.Bytes(), largest); err == nil {
		t.Error("a tensor larger than the device's buffers was mapped")
	}
}

// TestConcurrentSessions decodes two sequences at once on one backend.
func TestConcurrentSessions(t *testing.T) {
	f := fixture(t, "qwen2", "Q8_0")
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	want, _ := greedy(t, ref, f, 3)
	var wg sync.WaitGroup
	results := make([][][]float32, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Go(func() { results[i], _, errs[i] = decode(be, f, 3) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, got := range results {
		for step := range want {
			if !slices.Equal(got[step], want[step]) {
				t.Fatalf("session %d, step %d: logits differ from the CPU's", i, step)
			}
		}
	}
}

// TestJoinedDispatches: products over one input (Q, K, V) share a
// dispatch, as do the rotations of Q and K, and the results are those of
// separate dispatches (the CPU's).
func TestJoinedDispatches(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	p := newPair(t, be)
	const cols = 256
	wq := p.Weight(quant.Q4_K, 64, cols, p.Encode(quant.Q4_K, 64, cols, 1))
	wk := p.Weight(quant.Q4_K, 32, cols, p.Encode(quant.Q4_K, 32, cols, 1))
	wv := p.Weight(quant.Q4_K, 32, cols, p.Encode(quant.Q4_K, 32, cols, 1))
	w8 := p.Weight(quant.Q8_0, 32, cols, p.Encode(quant.Q8_0, 32, cols, 1))
	for _, n := range []int{1, 5} {
		x := p.Tensor(n, cols, p.Random(n*cols, 1))
		q, k, v, o := p.Tensor(n, 64, nil), p.Tensor(n, 32, nil), p.Tensor(n, 32, nil), p.Tensor(n, 32, nil)
		r := backend.RoPE{Dims: 16, Base: 10000, FreqScale: 1}
		before := be.Stats().Dispatches
		for _, side := range []struct {
			be         backend.Backend
			x          backend.Tensor
			q, k, v, o backend.Tensor
			wq, wk     backend.Weight
			wv, w8     backend.Weight
		}{
			{p.CPU, x.C, q.C, k.C, v.C, o.C, wq.C, wk.C, wv.C, w8.C},
			{p.Dev, x.D, q.D, k.D, v.D, o.D, wq.D, wk.D, wv.D, w8.D},
		} {
			side.be.MatMul(side.q, side.wq, side.x)
			side.be.MatMul(side.k, side.wk, side.x)
			side.be.MatMul(side.v, side.wv, side.x)
			side.be.MatMul(side.o, side.w8, side.x) // another type: its own dispatch
			side.be.RoPE(side.q, 16, 3, &r)
			side.be.RoPE(side.k, 16, 3, &r)
		}
		p.Compare("matmul", "q", q)
		p.Compare("matmul", "k", k)
		p.Compare("matmul", "v", v)
		p.Compare("matmul", "other type", o)
		// Q8_K and Q8_0 quantisations, the joined product, the other
		// product, the joined rotation.
		if got := be.Stats().Dispatches - before; got != 5 {
			t.Errorf("%d rows: %d dispatches, want 5", n, got)
		}
	}
}

// TestAddNorm: a residual add and the norm of its result are one
// dispatch, with the results of two.
func TestAddNorm(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	p := newPair(t, be)
	const rows, cols = 3, 320
	w := p.Weight(quant.F32, 1, cols, backendtest.F32Bytes(p.Random(cols, 1)))
	x, a, h := p.Tensor(rows, cols, p.Random(rows*cols, 1)), p.Tensor(rows, cols, p.Random(rows*cols, 1)), p.Tensor(rows, cols, nil)
	before := be.Stats().Dispatches
	for _, s := range []struct {
		be      backend.Backend
		x, a, h backend.Tensor
		w       backend.Weight
	}{{p.CPU, x.C, a.C, h.C, w.C}, {p.Dev, x.D, a.D, h.D, w.D}} {
		s.be.Add(s.x, s.a)
		s.be.RMSNorm(s.h, s.x, s.w, 1e-5)
		s.be.Add(s.x, s.a)
		s.be.RMSNorm(s.a, s.x, s.w, 1e-6) // into the addend
	}
	p.Compare("rmsnorm", "sum", x)
	p.Compare("rmsnorm", "norm", h)
	p.Compare("rmsnorm", "norm into the addend", a)
	if got := be.Stats().Dispatches - before; got != 2 {
		t.Errorf("%d dispatches, want 2", got)
	}
}

// TestEmbedManyIDs: more token ids than one setBytes carries (1024) are
// embedded in parts, with the CPU's results.
func TestEmbedManyIDs(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	p := newPair(t, be)
	const n, cols = 1100, 64
	w := p.Weight(quant.Q8_0, 4000, cols, p.Encode(quant.Q8_0, 4000, cols, 1))
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(p.Rng.IntN(4000))
	}
	y := p.Tensor(n, cols, nil)
	p.CPU.Embed(y.C, w.C, ids)
	p.Dev.Embed(y.D, w.D, ids)
	p.Compare("embed", "1100 ids", y)
}
