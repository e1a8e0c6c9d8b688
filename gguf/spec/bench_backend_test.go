package spec_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/cuda/cudaemu"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/metal"
	"github.com/meshnode/meshnode/metal/metalemu"
)

// benchBackend is the backend make bench-spec runs on, BENCH_BACKEND:
//   - cpu (the default): threads threads (BENCH_REPACK=1: weights read
//     from memory repacked at every product, cpu.Options.RepackStreamed);
//   - cuda: the driver library libcuda.so.1, or MESHNODE_CUDA_LIBRARY's
//     ("stand-in": the CPU stand-in, to try the benchmark without a GPU);
//   - metal: the system's Metal device, or with
//     MESHNODE_METAL_DEVICE=stand-in the CPU stand-in.
//
// A GPU's verified rows cost next to nothing where its one-token step is
// bound by memory or by launches, which is where speculation reaches its
// ideal; on the CPU an extra row is arithmetic (v, docs/engine.md). It
// skips where the named backend finds no device, and says what it
// runs on.
func benchBackend(b *testing.B, threads int) backend.Backend {
	switch name := os.Getenv("BENCH_BACKEND"); name {
	case "", "cpu":
		return cpu.New(cpu.Options{Threads: threads, RepackStreamed: os.Getenv("BENCH_REPACK") == "1"})
	case "cuda":
		be, err := cuda.New(cuda.Options{Library: cudaemu.Library(b)})
		if errors.Is(err, cuda.ErrNoDevice) {
			b.Skipf("BENCH_BACKEND=cuda: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		i := be.Info()
		fmt.Printf("backend: cuda, %s (compute capability %d.%d, %d SMs, %.1f GiB)\n", i.Name, i.Major, i.Minor, i.SMs, float64(i.MemoryBytes)/(1<<30))
		return be
	case "metal":
		var opt metal.Options
		if metalemu.StandIn() {
			d, err := metalemu.Open(metalemu.Path(b), metalemu.Config{})
			if err != nil {
				b.Fatal(err)
			}
			opt.Device = d
		}
		be, err := metal.New(opt)
		if errors.Is(err, metal.ErrNoDevice) {
			b.Skipf("BENCH_BACKEND=metal: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("backend: metal, %s\n", be.Info().Name)
		return be
	default:
		b.Fatalf("BENCH_BACKEND=%q: want cpu, cuda or metal", name)
		return nil
	}
}
