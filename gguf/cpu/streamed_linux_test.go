package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/internal/pages"
)

// TestStreamedPackReleasesPages: a Q8_0 weight read from memory and
// packed once (Options.RepackStreamed off) gives its file mapping's pages
// back to the kernel, so that the process does not hold the weights
// twice; repacked at every product, it keeps reading them. Both give the
// same bits.
func TestStreamedPackReleasesPages(t *testing.T) {
	const rows, cols = 256, 2048
	if !quant.PacksStreamed(quant.Q8_0, cols) {
		t.Skip("this CPU's kernels do not pack Q8_0 weights read from memory (quant.PacksStreamed: AVX-512 VNNI)")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	data := quantized(t, quant.Q8_0, normals(rng, rows*cols, 0.05))
	x := normals(rng, cols, 1)
	var outs [][]float32
	for _, repack := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "w.bin")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil { // clean pages, which the kernel may reclaim
			t.Fatal(err)
		}
		m, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })

		be := cpu.New(cpu.Options{Threads: 2, CacheBytes: -1, RepackStreamed: repack})
		t.Cleanup(func() { be.Close() })
		wt, err := be.Weight(quant.Q8_0, rows, cols, m)
		if err != nil {
			t.Fatal(err)
		}
		dst := tensor(be, 1, rows, nil)
		be.MatMul(dst, wt, tensor(be, 1, cols, x))
		outs = append(outs, read(be, dst))
		resident := residentPages(t, m)
		total := len(data) / os.Getpagesize()
		switch {
		case repack && resident < total-1:
			t.Fatalf("repacked at every product: %d of the weight's %d pages resident after a product, want all", resident, total)
		case !repack && resident > total/4:
			// Asked again here: a kernel that refuses, or a file system
			// whose pages it cannot give back (tmpfs without swap), is
			// the system's limit, not the backend's fault.
			if err := pages.Release(m); err != nil {
				t.Skipf("this kernel does not reclaim pages on request (MADV_PAGEOUT, Linux 5.4): %v", err)
			}
			if again := residentPages(t, m); again > total/4 {
				t.Skipf("this system keeps the pages of %s even when asked (%d of %d resident; tmpfs without swap?)", path, again, total)
			}
			t.Fatalf("packed once: %d of the weight's %d pages still resident after its first product, where asking gives them back", resident, total)
		}
	}
	if !slices.Equal(outs[0], outs[1]) {
		t.Fatal("the packed weight's product differs from the repacked one's")
	}
}

// residentPages counts b's pages in the process's resident memory: the
// Rss of b's mapping in /proc/self/smaps.
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps to read resident memory from: %v", err)
	}
	at := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	in := false
	for line := range strings.Lines(string(smaps)) {
		var lo, hi uint64
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = lo <= at && at < hi
			continue
		}
		var kb int
		if n, _ := fmt.Sscanf(line, "Rss: %d kB", &kb); n == 1 && in {
			return kb << 10 / os.Getpagesize()
		}
	}
	t.Fatalf("no mapping at %#x in /proc/self/smaps", at)
	return 0
}
