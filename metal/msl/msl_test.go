package msl

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	src := `#include <metal_stdlib>
using namespace metal;
struct Args { int n; };
// A macro standing for parameters, as the kernels use them.
#define COMMON device const float *x [[buffer(0)]], \
	constant Args &a [[buffer(2)]]
#define IDS uint3 tg [[threadgroup_position_in_grid]], ushort lane [[thread_index_in_simdgroup]]
/* kernel void commented(device float *y [[buffer(0)]]) {} */
kernel void k1(COMMON, device float *y [[buffer(1)]], threadgroup float *s [[threadgroup(0)]], IDS) {
	y[0] = x[0] + s[0];
}
static inline float helper(device const float *p) { return p[0]; }
kernel void k2(device float *y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 0; }
`
	ks, err := Parse([]File{{Name: "t.metal", Text: src}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 2 || ks[0].Name != "k1" || ks[1].Name != "k2" {
		t.Fatalf("kernels %+v", ks)
	}
	k := ks[0]
	want := []Param{
		{Type: "device const float *", Name: "x", Kind: Buffer, Index: 0},
		{Type: "constant Args &", Name: "a", Kind: Buffer, Index: 2, Ref: true},
		{Type: "device float *", Name: "y", Kind: Buffer, Index: 1},
		{Type: "threadgroup float *", Name: "s", Kind: Threadgroup, Index: 0},
		{Type: "uint3", Name: "tg", Kind: Position, Attr: "threadgroup_position_in_grid"},
		{Type: "ushort", Name: "lane", Kind: Position, Attr: "thread_index_in_simdgroup"},
	}
	if len(k.Params) != len(want) {
		t.Fatalf("k1 params %+v", k.Params)
	}
	for i, p := range k.Params {
		if p != want[i] {
			t.Errorf("param %d: %+v, want %+v", i, p, want[i])
		}
	}
	if b := k.Buffers(); len(b) != 3 || b[0] != 0 || b[2] != 2 {
		t.Errorf("buffers %v", b)
	}
	if ks[1].Line != 13 {
		t.Errorf("k2 at line %d, want 13", ks[1].Line)
	}

	host := HostSource([]File{{Name: "t.metal", Text: src}})
	if strings.Contains(host, "[[") || !strings.Contains(host, `#line 1 "t.metal"`) || strings.Count(host, "\n") != strings.Count(src, "\n")+1 {
		t.Errorf("host source keeps attributes or lines moved:\n%s", host)
	}

	for _, bad := range []string{
		"kernel void k(device float *y) {}",                                                                // no attribute
		"kernel void k(device float *y [[buffer]]) {}",                                                     // no index
		"kernel void k(uint i [[thread_position_in_grid(0)]]) {}",                                          // an index where none goes
		"kernel void k(uint i [[sample_id]]) {}",                                                           // not a compute attribute
		"kernel float k(device float *y [[buffer(0)]]) { return 0; }",                                      // not void
		"kernel void k(device float *y [[buffer(0)]]) {}\nkernel void k(device float *y [[buffer(0)]]) {}", // twice
	} {
		if _, err := Parse([]File{{Name: "bad.metal", Text: bad}}); err == nil {
			t.Errorf("Parse accepted %q", bad)
		}
	}
}

// TestLintRules: each rule finds the mistake it is for, and only that.
func TestLintRules(t *testing.T) {
	head := "#include <metal_stdlib>\nusing namespace metal;\n"
	cases := []struct {
		rule, src string
	}{
		{RuleAddressSpace, "static float f(float *p) { return p[0]; }"},
		{RuleAddressSpace, "static void f(thread float &r, const int &n) { r = n; }"},
		{RuleAddressSpace, "kernel void k(float *y [[buffer(0)]]) { y[0] = 0; }"},
		{RuleKernelParam, "kernel void k(threadgroup float *y [[buffer(0)]]) { y[0] = 0; }"},
		{RuleKernelParam, "kernel void k(device float *y [[threadgroup(0)]]) { y[0] = 0; }"},
		{RuleKernelParam, "kernel void k(device float *y [[buffer(0)]], int i [[thread_position_in_grid]]) { y[i] = 0; }"},
		{RuleKernelParam, "kernel void k(device float *y [[buffer(0)]], device float *z [[buffer(0)]]) { y[0] = z[0]; }"},
		{RuleKernelParam, "kernel void k(device float *y [[buffer(31)]]) { y[0] = 0; }"},
		{RuleKernelParam, "kernel void k(device float *y [[buffer(0)]], uint3 l [[thread_index_in_simdgroup]]) { y[0] = 0; }"},
		{RuleGridComponents, "kernel void k(device float *y [[buffer(0)]], uint3 g [[threadgroup_position_in_grid]], uint n [[threads_per_threadgroup]]) { y[g.x] = n; }"},
		{RuleDouble, "static float f(float x) { double d = x; return d; }"},
		{RuleRecursion, "static int f(int n) { return n ? f(n - 1) : 0; }"},
		{RuleRecursion, "static int g(int n);\nstatic int f(int n) { return g(n); }\nstatic int g(int n) { return n ? f(n - 1) : 0; }"},
		{RuleLibrary, "static float f(float x) { return std::sqrt(x); }"},
		{RuleLibrary, "static void f(device float *p) { memcpy(p, p + 1, 4); }"},
		{RuleLibrary, "static float f(float x) { return __builtin_fabsf(x); }"},
		{RuleHexFloat, "static float f(float x) { return x * 0x1.8p23f; }"},
		{RuleGlobal, "float scratch[4];"},
		{RuleStaticLocal, "static float f(float x) { static float last = 0; last = x; return last; }"},
		{RuleThreadgroupLocal, "kernel void k(device float *y [[buffer(0)]]) { threadgroup float s[32]; s[0] = 1; y[0] = s[0]; }"},
	}
	for _, c := range cases {
		probs := Lint([]File{{Name: "bad.metal", Text: head + c.src}})
		found := false
		for _, p := range probs {
			if p.Rule == c.rule {
				found = true
			} else {
				t.Errorf("%q: unexpected %s", c.src, p)
			}
		}
		if !found {
			t.Errorf("%q: the %s rule found nothing", c.src, c.rule)
		}
	}
	// What MSL allows passes.
	good := head + `constant char table[2] = {1, 2};
struct Args { int n; };
static inline float f(device const float *p, thread float &r, threadgroup float *s) { r = p[0] + s[0]; return r; }
kernel void k(device const float *x [[buffer(0)]], device float *y [[buffer(1)]], constant Args &a [[buffer(2)]],
	      threadgroup float *s [[threadgroup(0)]], uint3 g [[threadgroup_position_in_grid]], uint3 n [[threads_per_threadgroup]],
	      ushort lane [[thread_index_in_simdgroup]]) {
	float r;
	y[g.x * n.x + lane] = f(x, r, s) * float(table[a.n]);
}
`
	if probs := Lint([]File{{Name: "good.metal", Text: good}}); len(probs) > 0 {
		t.Errorf("a clean source: %v", probs)
	}
}
