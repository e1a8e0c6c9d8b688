package kernels

import (
	"regexp"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/metal/msl"
)

// TestLint: the sources pass the lint for what the stand-in's C++ build
// accepts and Metal refuses (there is no MSL compiler on Linux).
func TestLint(t *testing.T) {
	for _, p := range msl.Lint(Files()) {
		t.Error(p)
	}
}

// structFields counts the 32-bit scalar fields of each struct the sources
// define whose fields are all int, uint or float (the argument
// structures).
func structFields(t *testing.T) map[string]int {
	re := regexp.MustCompile(`(?s)struct\s+(\w+)\s*\{([^{}]*)\};`)
	out := map[string]int{}
	for _, f := range Files() {
		for _, m := range re.FindAllStringSubmatch(f.Text, -1) {
			n, ok := 0, true
			for _, decl := range strings.Split(m[2], ";") {
				decl = regexp.MustCompile(`//[^\n]*`).ReplaceAllString(decl, "")
				decl = strings.TrimSpace(decl)
				if decl == "" {
					continue
				}
				typ, names, _ := strings.Cut(decl, " ")
				if typ != "int" && typ != "uint" && typ != "float" {
					ok = false
					break
				}
				n += len(strings.Split(names, ","))
			}
			if ok {
				out[m[1]] = n
			}
		}
	}
	return out
}

// TestContract: every kernel the backend dispatches is in the sources,
// with the bindings its contract states: a buffer, the argument structure
// (as many 32-bit fields as the host sends) or dispatch data at each
// index; threadgroup memory at the indices it sets; and nothing else.
func TestContract(t *testing.T) {
	ks, err := msl.Parse(Files())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]msl.Kernel{}
	for _, k := range ks {
		byName[k.Name] = k
	}
	fields := structFields(t)
	for id := range Count {
		k, ok := byName[id.Name()]
		if !ok {
			t.Errorf("%s: not in the sources", id)
			continue
		}
		delete(byName, id.Name())
		layout := id.Binding()
		if got := k.Buffers(); len(got) != len(layout) || (len(got) > 0 && got[len(got)-1] != len(layout)-1) {
			t.Errorf("%s binds buffers %v, the contract %q", id, got, layout)
		}
		for i, c := range layout {
			p, ok := k.Param(msl.Buffer, i)
			if !ok {
				t.Errorf("%s: nothing at buffer(%d)", id, i)
				continue
			}
			switch c {
			case 'b':
				if p.Ref || !strings.HasPrefix(p.Type, "device ") {
					t.Errorf("%s: buffer(%d) %s is %q, want a device pointer", id, i, p.Name, p.Type)
				}
			case 'a':
				typ := strings.Fields(strings.TrimSuffix(p.Type, "&"))
				if !p.Ref || typ[0] != "constant" {
					t.Errorf("%s: buffer(%d) %s is %q, want a constant reference", id, i, p.Name, p.Type)
				} else if n, ok := fields[typ[len(typ)-1]]; !ok || n != id.Args() {
					t.Errorf("%s: %s has %d 32-bit fields (known %v), the host sends %d", id, typ[len(typ)-1], n, ok, id.Args())
				}
			case 'd':
				if p.Ref || !strings.HasPrefix(p.Type, "constant ") {
					t.Errorf("%s: buffer(%d) %s is %q, want a constant pointer", id, i, p.Name, p.Type)
				}
			default:
				t.Errorf("%s: binding letter %q", id, c)
			}
		}
		tgs := id.Threadgroup()
		if got := k.Threadgroups(); len(got) != len(tgs) {
			t.Errorf("%s has threadgroup memory %v, the host sets %d", id, got, len(tgs))
		}
		for _, n := range tgs {
			if n <= 0 || n%16 != 0 {
				t.Errorf("%s: threadgroup memory of %d bytes", id, n)
			}
		}
	}
	for name := range byName {
		t.Errorf("kernel %s is in the sources but the backend has no ID for it", name)
	}
	if _, ok := WeightKernel(quant.TQ2_0, MatVec); ok {
		t.Error("TQ2_0 has kernels")
	}
}

// TestShapes: the dispatch shapes cover their problems within Metal's
// limits.
func TestShapes(t *testing.T) {
	cases := []struct {
		name  string
		s     Shape
		cover int // threadgroups × coverage must reach this
		per   int
	}{
		{"elementwise", Elementwise(1000), 1000, 256},
		{"quantize q8_0", Quantize(QuantizeQ8_0, 33), 33, 8},
		{"quantize q8_k", Quantize(QuantizeQ8_K, 9), 9, 4},
		{"mv rows", MatShape(quant.Q4_0, [MaxMats]int{37, 5, 0}, 1), 10 + 2, 1},
		{"mm rows", MatShape(quant.Q4_K, [MaxMats]int{100}, 17), 4 * 3, 1},
		{"mv8 rows", MatShape(quant.F16, [MaxMats]int{9}, 17), 3 * 3, 1},
		{"argmax", ArgMaxShape(896), 1, 1},
	}
	for _, c := range cases {
		if err := c.s.Check(1024); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if got := c.s.Groups.Threads() * c.per; got < c.cover {
			t.Errorf("%s: %v covers %d, want %d", c.name, c.s, got, c.cover)
		}
	}
	if s := ArgMaxShape(896); s.Threads.W != 896 {
		t.Errorf("argmax on a pipeline of 896 threads: %v", s)
	}
	if err := (Shape{Groups: size(1, 1, 1), Threads: size(2048, 1, 1)}).Check(1024); err == nil {
		t.Error("2048 threads per threadgroup passed")
	}
	if n := AttendChunk(500, 32, 4096, 64<<20); n != 128 {
		t.Errorf("attention chunk %d, want 128", n)
	}
}

// TestSource: the program Metal compiles holds every file, in order.
func TestSource(t *testing.T) {
	src := Source()
	last := -1
	for _, name := range order {
		i := strings.Index(src, "// ---- "+name+" ----")
		if i <= last {
			t.Errorf("%s missing or out of order", name)
		}
		last = i
	}
	if !strings.HasPrefix(strings.TrimSpace(strings.SplitN(src, "\n", 3)[1]), "//") {
		t.Errorf("the program does not start with common.metal's header")
	}
}
