package metalemu

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/meshnode/meshnode/metal/msl"
	"github.com/meshnode/meshnode/metal/mtl"
)

// refusals is the stand-in's test program (testdata/refusals.metal).
func refusals(t *testing.T) *Device {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a stand-in library")
	}
	b, err := os.ReadFile("testdata/refusals.metal")
	if err != nil {
		t.Fatal(err)
	}
	files := []msl.File{{Name: "refusals.metal", Text: string(b)}}
	d, err := OpenProgram(ProgramPath(t, files), files, Config{})
	if err != nil {
		t.Fatal(err)
	}
	lib, err := d.NewLibrary(msl.Concat(files))
	if err != nil {
		t.Fatal(err)
	}
	testLib = lib
	return d
}

var testLib mtl.Library

func args(n int, s float32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(n))
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(s))
}

// run dispatches kernel name with out at buffer(0) (and whatever set adds)
// and returns the command buffer's error.
func run(t *testing.T, d *Device, name string, groups, threads mtl.Size, set func(e mtl.Encoder)) error {
	t.Helper()
	p, err := testLib.Pipeline(name)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := d.NewCommandBuffer()
	if err != nil {
		t.Fatal(err)
	}
	e := cb.Encoder()
	e.SetPipeline(p)
	if set != nil {
		set(e)
	}
	e.Dispatch(groups, threads)
	cb.Commit()
	return cb.Wait()
}

// TestGood runs a kernel that keeps Metal's rules: barriers, shuffles, a
// SIMD-group sum, threadgroup memory and a simdgroup matrix product give
// what they would on a GPU.
func TestGood(t *testing.T) {
	d := refusals(t)
	const n = 150
	out, err := d.NewBuffer(4 * (n + 64))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	err = run(t, d, "good", mtl.Size{W: 3, H: 1, D: 1}, mtl.Size{W: 64, H: 1, D: 1}, func(e mtl.Encoder) {
		e.SetBuffer(0, out, 0)
		e.SetBytes(1, args(n, 0.5))
		e.SetThreadgroupMemory(0, 4*(16+128))
	})
	if err != nil {
		t.Fatal(err)
	}
	got := unsafe.Slice((*float32)(out.Contents()), n+64)
	for i := range n {
		lane := i % 64 % 32
		if want := float32(496*0.5) + float32(i/64) + float32(lane^1); got[i] != want {
			t.Fatalf("out[%d] = %v, want %v", i, got[i], want)
		}
	}
	for i := range 8 {
		for j := range 8 {
			want := 0
			for k := range 8 {
				want += (i + 2*k) * (k + 2*j)
			}
			if g := got[n+8*i+j]; g != float32(want) {
				t.Errorf("product [%d][%d] = %v, want %d", i, j, g, want)
			}
		}
	}
	if d.Live() != 1 {
		t.Errorf("%d buffers live, want 1", d.Live())
	}
}

// TestRefusals: kernels that break Metal's rules fail their command buffer
// with the reason, as a faulting kernel does on a GPU (the wait itself
// succeeds).
func TestRefusals(t *testing.T) {
	d := refusals(t)
	out, err := d.NewBuffer(4 * 64)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	bindOut := func(e mtl.Encoder) {
		e.SetBuffer(0, out, 0)
		e.SetThreadgroupMemory(0, 256)
	}
	for _, c := range []struct{ kernel, want string }{
		{"barrier_after_return", "a threadgroup_barrier some threads of the threadgroup never reach: they returned"},
		{"unreachable_barrier", "a threadgroup_barrier some threads of the threadgroup never reach: they returned"},
		{"divergent_collective", "at different collectives"},
		{"collective_after_return", "simd_shuffle_down in a SIMD group some of whose lanes returned"},
		{"divergent_matrix_load", "arguments that differ between lanes"},
	} {
		err := run(t, d, c.kernel, mtl.Size{W: 1, H: 1, D: 1}, mtl.Size{W: 64, H: 1, D: 1}, bindOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.kernel, err, c.want)
		}
	}
}

// TestEncoderChecks: dispatches the GPU could not run correctly are
// refused: a buffer not bound, an argument structure cut short, threadgroup
// memory of a length Metal refuses or beyond the device's, too many
// threads, a released buffer.
func TestEncoderChecks(t *testing.T) {
	d := refusals(t)
	out, err := d.NewBuffer(4 * 256)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := d.NewBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	gone.Release()
	one, g64 := mtl.Size{W: 1, H: 1, D: 1}, mtl.Size{W: 64, H: 1, D: 1}
	for _, c := range []struct {
		name    string
		threads mtl.Size
		set     func(e mtl.Encoder)
		want    string
	}{
		{"unbound", g64, func(e mtl.Encoder) { e.SetBytes(1, args(1, 1)); e.SetThreadgroupMemory(0, 576) }, "nothing bound at buffer(0)"},
		{"short args", g64, func(e mtl.Encoder) {
			e.SetBuffer(0, out, 0)
			e.SetBytes(1, args(1, 1)[:4])
			e.SetThreadgroupMemory(0, 576)
		}, "the structure reads 8"},
		{"tg length", g64, func(e mtl.Encoder) { e.SetBuffer(0, out, 0); e.SetBytes(1, args(1, 1)); e.SetThreadgroupMemory(0, 100) }, "multiple of 16"},
		{"tg size", g64, func(e mtl.Encoder) {
			e.SetBuffer(0, out, 0)
			e.SetBytes(1, args(1, 1))
			e.SetThreadgroupMemory(0, 64<<10)
		}, "exceed the device's"},
		{"threads", mtl.Size{W: 2048, H: 1, D: 1}, func(e mtl.Encoder) { e.SetBuffer(0, out, 0); e.SetBytes(1, args(1, 1)); e.SetThreadgroupMemory(0, 576) }, "threads"},
		{"released", g64, func(e mtl.Encoder) {
			e.SetBuffer(0, gone, 0)
			e.SetBytes(1, args(1, 1))
			e.SetThreadgroupMemory(0, 576)
		}, "was released"},
		{"offset", g64, func(e mtl.Encoder) {
			e.SetBuffer(0, out, 4*256)
			e.SetBytes(1, args(1, 1))
			e.SetThreadgroupMemory(0, 576)
		}, "offset 1024 of a 1024-byte buffer"},
	} {
		err := run(t, d, "good", one, c.threads, c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if _, err := d.NewBufferNoCopy(unsafe.Pointer(&make([]byte, 3*pageLen)[1]), pageLen); err == nil {
		t.Error("a no-copy buffer at an address off a page boundary")
	}
	if _, err := d.NewLibrary("kernel void other() {}"); err == nil {
		t.Error("a library of another program")
	}
}

// TestGuardPage: a kernel that reads one float past its buffer crashes
// (the buffer ends at a guard page) instead of reading garbage. The read
// runs in a child process.
func TestGuardPage(t *testing.T) {
	if os.Getenv("METALEMU_GUARD_CHILD") == "1" {
		d := refusals(t)
		const n = 64 // 256 bytes: the buffer ends exactly at the guard page
		in, _ := d.NewBuffer(4 * n)
		out, _ := d.NewBuffer(16)
		err := run(t, d, "read_past", mtl.Size{W: 1, H: 1, D: 1}, mtl.Size{W: 32, H: 1, D: 1}, func(e mtl.Encoder) {
			e.SetBuffer(0, in, 0)
			e.SetBuffer(1, out, 0)
			e.SetBytes(2, args(n, 0))
		})
		t.Fatalf("read past the buffer and lived: %v", err)
	}
	refusals(t) // builds the library, or skips
	cmd := exec.Command(os.Args[0], "-test.run=^TestGuardPage$", "-test.count=1")
	cmd.Env = append(os.Environ(), "METALEMU_GUARD_CHILD=1")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "SIGSEGV") {
		t.Fatalf("the child: %v\n%s", err, b)
	}
}
