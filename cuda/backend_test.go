package cuda_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/cuda/cudaemu"
	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/backend/backendtest"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
)

func TestNewWithoutDriver(t *testing.T) {
	_, err := cuda.New(cuda.Options{Library: "/nonexistent/libcuda.so.1"})
	if !errors.Is(err, cuda.ErrNoDevice) || !errors.Is(err, driver.ErrNoLibrary) {
		t.Fatalf("New without a driver: %v", err)
	}
}

// configure sets the stand-in's device for one test.
func configure(t *testing.T, d cudaemu.Device) *cudaemu.Hooks {
	t.Helper()
	h, err := cudaemu.Open(cudaemu.Path(t))
	if err != nil {
		t.Fatal(err)
	}
	h.Configure(d)
	t.Cleanup(func() { h.Configure(cudaemu.DefaultDevice) })
	return h
}

func TestNewRefusesDevices(t *testing.T) {
	lib := cudaemu.Path(t)
	cases := []struct {
		name string
		dev  cudaemu.Device
		opt  cuda.Options
		want string
	}{
		{"no devices", cudaemu.Device{Count: 0, Major: 8}, cuda.Options{}, "device 0 of 0"},
		{"ordinal", cudaemu.DefaultDevice, cuda.Options{Device: 2}, "device 2 of 1"},
		{"too old", cudaemu.Device{Count: 1, Major: 7, Minor: 0}, cuda.Options{}, "7.0 is below 7.2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			configure(t, c.dev)
			c.opt.Library = lib
			_, err := cuda.New(c.opt)
			if !errors.Is(err, cuda.ErrNoDevice) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want ErrNoDevice saying %q", err, c.want)
			}
		})
	}
}

// TestArchSelection runs a product on a 7.5 device (which loads the sm_72
// module) and an 8.9 one (sm_80).
func TestArchSelection(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		arch         string
	}{{7, 5, "sm_72"}, {8, 9, "sm_80"}} {
		configure(t, cudaemu.Device{Count: 1, Major: c.major, Minor: c.minor})
		be, _ := newEmu(t, cuda.Options{})
		if got := be.Info().Arch; got != c.arch {
			t.Errorf("%d.%d loaded %s, want %s", c.major, c.minor, got, c.arch)
		}
		p := newPair(t, be)
		w := p.Weight(quant.Q4_K, 8, 256, p.Encode(quant.Q4_K, 8, 256, 1))
		x, y := p.Tensor(1, 256, p.Random(256, 1)), p.Tensor(1, 8, nil)
		p.CPU.MatMul(y.C, w.C, x.C)
		p.Dev.MatMul(y.D, w.D, x.D)
		p.Compare("matmul", c.arch, y)
		be.Close()
	}
}

// TestGraphs: decode steps launched as graphs give the eager launches'
// logits, and a driver that cannot capture leaves the backend launching
// kernel by kernel with the same results.
func TestGraphs(t *testing.T) {
	f := fixture(t, "gemma3", "Q4_K_M")
	run := func(opt cuda.Options, d cudaemu.Device) ([][]float32, cuda.Stats, cuda.Info) {
		configure(t, d)
		be, _ := newEmu(t, opt)
		defer be.Close()
		logits, _ := greedy(t, be, f, 6)
		return logits, be.Stats(), be.Info()
	}
	eager, es, _ := run(cuda.Options{NoGraphs: true}, cudaemu.DefaultDevice)
	graphed, gs, _ := run(cuda.Options{}, cudaemu.DefaultDevice)
	refused, rs, ri := run(cuda.Options{}, cudaemu.Device{Count: 1, Major: 8, NoGraphs: true})
	if es.Graphs != 0 || gs.Graphs < 4 || gs.Captures != 1 {
		t.Errorf("eager %+v, graphed %+v: want no graphs, then one capture replayed for the decode steps", es, gs)
	}
	if rs.Graphs != 0 || ri.Graphs {
		t.Errorf("with capture refused: %+v, %+v", rs, ri)
	}
	for step := range eager {
		if !slices.Equal(eager[step], graphed[step]) || !slices.Equal(eager[step], refused[step]) {
			t.Fatalf("step %d: logits differ between eager and graph launches", step)
		}
	}
}

// TestGraphsInterleaved: steps that recur between others, as a
// speculative window does between the draft's steps, are captured when
// seen again and then replayed, with the eager launches' logits.
func TestGraphsInterleaved(t *testing.T) {
	f := fixture(t, "llama", "Q4_0")
	// rounds of a three-token window and a one-token step, each on a
	// session of its own and trimmed back after, as spec.Measure times
	// them; the logits of every step.
	run := func(opt cuda.Options, rounds int) ([][]float32, cuda.Stats) {
		be, _ := newEmu(t, opt)
		defer be.Close()
		m, err := model.Load(f, be)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var sessions [2]*model.Session
		for i := range sessions {
			if sessions[i], err = m.NewSession(model.SessionOptions{Context: modelContext}); err != nil {
				t.Fatal(err)
			}
			defer sessions[i].Close()
			if _, err := sessions[i].Eval(ctx, modelPrompt); err != nil {
				t.Fatal(err)
			}
		}
		var all [][]float32
		for range rounds {
			for i, toks := range [][]uint32{{5, 6, 7}, {9}} {
				s := sessions[i]
				logits, err := s.Eval(ctx, toks)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, append([]float32(nil), logits...))
				s.Truncate(len(modelPrompt))
			}
		}
		return all, be.Stats()
	}
	eager, _ := run(cuda.Options{NoGraphs: true}, 4)
	graphed, st := run(cuda.Options{}, 4)
	// Rounds 2 to 4 launch both steps as graphs, 2 capturing them.
	if st.Captures != 2 || st.Graphs != 6 {
		t.Errorf("four rounds: %+v, want 2 captures and 6 graph launches", st)
	}
	for i := range eager {
		if !slices.Equal(eager[i], graphed[i]) {
			t.Fatalf("step %d: logits differ between eager and graph launches", i)
		}
	}
}

// TestMemory: device memory of dropped tensors is freed at the next sync,
// an allocation the device cannot hold is an error where the interface
// has one, and Close frees everything.
func TestMemory(t *testing.T) {
	be, h := newEmu(t, cuda.Options{})
	base := h.Live()
	func() {
		for range 20 {
			be.NewTensor(64, 64)
		}
	}()
	if h.Live() < base+20 {
		t.Fatalf("%d allocations after making 20 tensors from %d", h.Live(), base)
	}
	settle()
	keep := be.NewTensor(1, 4)
	be.Read(make([]float32, 4), keep) // a sync: released memory goes
	if got := h.Live(); got > base+1 {
		t.Errorf("%d allocations after dropping the tensors, want %d", got, base+1)
	}

	h.SetMemory(1 << 20)
	defer h.SetMemory(16 << 30)
	_, err := be.NewKVCache(quant.F16, 4096, []backend.KVShape{{KVHeads: 8, HeadDimK: 128, HeadDimV: 128}})
	if !errors.Is(err, driver.ErrOutOfMemory) {
		t.Errorf("a KV cache beyond the device's memory: %v", err)
	}
	_, err = be.Weight(quant.F32, 1024, 1024, make([]byte, 4<<20))
	if !errors.Is(err, driver.ErrOutOfMemory) {
		t.Errorf("a weight beyond the device's memory: %v", err)
	}
	if _, err := be.Weight(quant.TQ2_0, 1, 256, make([]byte, 66)); !errors.Is(err, cuda.ErrType) {
		t.Errorf("a type without kernels: %v", err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.Live(); n != 0 {
		t.Errorf("%d allocations outlive Close", n)
	}
	defer func() {
		if recover() == nil {
			t.Error("a backend used after Close did not panic")
		}
	}()
	be.NewTensor(1, 1)
}

// TestHostMapped: on an integrated Orin-class device the model file's
// mapping is registered with the device and the weights are read in
// place, with the same results.
func TestHostMapped(t *testing.T) {
	configure(t, cudaemu.Device{Count: 1, Major: 8, Minor: 7, Integrated: true})
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
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	if ok, err := be.MapHost(f.Bytes()); !ok || err != nil {
		t.Fatalf("MapHost: %v, %v", ok, err)
	}
	got, _ := greedy(t, be, f, 3)
	if st := be.Stats(); st.UploadedBytes != 0 || !be.Info().HostMapped {
		t.Errorf("weights were copied (%d bytes) though the file is mapped", st.UploadedBytes)
	}
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	want, _ := greedy(t, ref, f, 3)
	for step := range want {
		if !slices.Equal(got[step], want[step]) {
			t.Fatalf("step %d: logits from mapped weights differ from the CPU's", step)
		}
	}
	// A discrete GPU copies instead.
	configure(t, cudaemu.DefaultDevice)
	be2, _ := newEmu(t, cuda.Options{})
	defer be2.Close()
	if ok, _ := be2.MapHost(f.Bytes()); ok {
		t.Error("a discrete device mapped the file under PlaceAuto")
	}
}

// TestConcurrentSessions decodes two sequences at once on one backend.
func TestConcurrentSessions(t *testing.T) {
	f := fixture(t, "qwen2", "Q8_0")
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	want, _ := greedy(t, ref, f, 5)
	var wg sync.WaitGroup
	results := make([][][]float32, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Go(func() { results[i], _, errs[i] = decode(be, f, 5) })
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

// TestJoinedLaunches: products over one input (Q, K, V) share a launch,
// as do the rotations of Q and K, and the results are those of separate
// launches (the CPU's).
func TestJoinedLaunches(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{NoGraphs: true})
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
		before := be.Stats().Launches
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
			side.be.MatMul(side.o, side.w8, side.x) // another type: its own launch
			side.be.RoPE(side.q, 16, 3, &r)
			side.be.RoPE(side.k, 16, 3, &r)
		}
		p.Compare("matmul", "q", q)
		p.Compare("matmul", "k", k)
		p.Compare("matmul", "v", v)
		p.Compare("matmul", "other type", o)
		// Q8_K and Q8_0 quantisations, the joined product, the other
		// product, the joined rotation (and the writes of x).
		if got := be.Stats().Launches - before; got != 5+1 {
			t.Errorf("%d rows: %d launches, want 6", n, got)
		}
	}
}

// TestAddNorm: a residual add and the norm of its result are one launch,
// with the results of two.
func TestAddNorm(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{NoGraphs: true})
	defer be.Close()
	p := newPair(t, be)
	const rows, cols = 3, 320
	w := p.Weight(quant.F32, 1, cols, backendtest.F32Bytes(p.Random(cols, 1)))
	x, a, h := p.Tensor(rows, cols, p.Random(rows*cols, 1)), p.Tensor(rows, cols, p.Random(rows*cols, 1)), p.Tensor(rows, cols, nil)
	before := be.Stats().Launches
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
	// Two writes (x and a) and two fused launches.
	if got := be.Stats().Launches - before; got != 2+2 {
		t.Errorf("%d launches, want 4", got)
	}
}
