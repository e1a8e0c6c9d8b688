// Package kernels is the Metal backend's device code: MSL sources
// embedded in the binary, which Metal compiles when the backend starts,
// and the contract each kernel has with the host — its name, the buffers
// and argument structure it binds, and the threadgroups a problem of a
// given size takes, as pure functions. The tests check the contract
// against the sources (package metal/msl reads them) and lint the sources
// for what the stand-in's C++ build accepts and Metal refuses.
package kernels

import (
	"embed"
	"fmt"

	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/metal/msl"
	"github.com/meshnode/meshnode/metal/mtl"
)

//go:embed *.metal
var sources embed.FS

// order is the sources' order in the one program they make.
var order = []string{"common.metal", "quantize.metal", "types.metal", "matvec.metal", "matmul.metal", "ops.metal"}

// Files returns the MSL sources, in program order.
func Files() []msl.File {
	out := make([]msl.File, len(order))
	for i, name := range order {
		b, err := sources.ReadFile(name)
		if err != nil {
			panic(err) // embedded: cannot fail
		}
		out[i] = msl.File{Name: name, Text: string(b)}
	}
	return out
}

// Source is the program Metal compiles.
func Source() string { return msl.Concat(Files()) }

// ID names a kernel.
type ID int

// The kernels that do not depend on a weight type. Each weight type then
// has three (see WeightKernel).
const (
	QuantizeQ8_0 ID = iota
	QuantizeQ8_1
	QuantizeQ8_K
	RMSNorm
	AddRMSNorm
	Add
	Scale
	Softcap
	AddBias
	GLU
	RoPE
	StoreKVF16
	StoreKVF32
	AttendF16
	AttendF32
	ArgMax
	GatedConv
	numFixed
)

var fixedNames = [numFixed]string{
	QuantizeQ8_0: "quantize_q8_0", QuantizeQ8_1: "quantize_q8_1", QuantizeQ8_K: "quantize_q8_k",
	RMSNorm: "rms_norm", AddRMSNorm: "add_rms_norm", Add: "add", Scale: "scale", Softcap: "softcap", AddBias: "add_bias",
	GLU: "glu", RoPE: "rope", StoreKVF16: "store_kv_f16", StoreKVF32: "store_kv_f32", AttendF16: "attend_f16",
	AttendF32: "attend_f32", ArgMax: "argmax", GatedConv: "gated_conv",
}

// WeightKind is one of a weight type's kernels.
type WeightKind int

// A weight type's kernels.
const (
	// MatVec: y = x·wᵀ for one activation row (mv_<type>).
	MatVec WeightKind = iota
	// MatMul: the same for several rows: simdgroup matrices for quantised
	// types (mm_<type>), eight rows per weight load for float types
	// (mv8_<type>).
	MatMul
	// Embed: rows of the table, dequantised (embed_<type>).
	Embed
	numWeightKinds
)

var weightTypes = []struct {
	t    quant.Type
	name string
}{
	{quant.Q4_0, "q4_0"}, {quant.Q4_1, "q4_1"}, {quant.Q5_0, "q5_0"}, {quant.Q5_1, "q5_1"}, {quant.Q8_0, "q8_0"},
	{quant.IQ4_NL, "iq4_nl"}, {quant.Q2_K, "q2_k"}, {quant.Q3_K, "q3_k"}, {quant.Q4_K, "q4_k"}, {quant.Q5_K, "q5_k"},
	{quant.Q6_K, "q6_k"}, {quant.IQ4_XS, "iq4_xs"},
	{quant.F32, "f32"}, {quant.F16, "f16"}, {quant.BF16, "bf16"},
}

// Count is the number of kernels.
var Count = ID(int(numFixed) + len(weightTypes)*int(numWeightKinds))

// WeightKernel is the kernel of kind k for weights of type t, and whether
// t has kernels.
func WeightKernel(t quant.Type, k WeightKind) (ID, bool) {
	for i, w := range weightTypes {
		if w.t == t {
			return numFixed + ID(i*int(numWeightKinds)+int(k)), true
		}
	}
	return 0, false
}

// WeightTypes lists the weight types that have kernels.
func WeightTypes() []quant.Type {
	ts := make([]quant.Type, len(weightTypes))
	for i, w := range weightTypes {
		ts[i] = w.t
	}
	return ts
}

// weight returns id's weight type and kind; ok is false for a fixed
// kernel.
func (id ID) weight() (t quant.Type, name string, k WeightKind, ok bool) {
	if id < numFixed || id >= Count {
		return 0, "", 0, false
	}
	i := int(id - numFixed)
	w := weightTypes[i/int(numWeightKinds)]
	return w.t, w.name, WeightKind(i % int(numWeightKinds)), true
}

// Name is the kernel's function name in the MSL.
func (id ID) Name() string {
	if id >= 0 && id < numFixed {
		return fixedNames[id]
	}
	t, name, k, ok := id.weight()
	if !ok {
		return fmt.Sprintf("kernel(%d)", int(id))
	}
	switch k {
	case MatVec:
		return "mv_" + name
	case MatMul:
		if isFloat(t) {
			return "mv8_" + name
		}
		return "mm_" + name
	}
	return "embed_" + name
}

func (id ID) String() string { return id.Name() }

func isFloat(t quant.Type) bool { return t == quant.F32 || t == quant.F16 || t == quant.BF16 }

// Binding is the contract of a kernel's [[buffer(n)]] slots: what the
// host binds at each index, as the letters of a string, index by index:
// 'b' a buffer, 'a' the argument structure (setBytes), 'd' data of the
// dispatch's own (setBytes: token ids).
// Threadgroup memory is listed apart, as lengths in bytes for a dispatch.
func (id ID) Binding() string {
	if id >= 0 && id < numFixed {
		return fixedBindings[id]
	}
	t, _, k, _ := id.weight()
	if k == Embed {
		return "bdba"
	}
	act, _ := quant.VecDotType(t)
	// Weights 0-2, outputs 3-5, MVArgs 6, then the activation.
	switch {
	case isFloat(t):
		return "bbbbbbab" // float32 rows
	case act == quant.Q8_0:
		return "bbbbbbabb" // quants, scales
	default:
		return "bbbbbbabbb" // quants, scales, extra
	}
}

var fixedBindings = [numFixed]string{
	QuantizeQ8_0: "bbba", QuantizeQ8_1: "bbbba", QuantizeQ8_K: "bbbba",
	RMSNorm: "bbba", AddRMSNorm: "bbbba", Add: "bba", Scale: "ba", Softcap: "ba", AddBias: "bba", GLU: "bbba",
	RoPE: "bbba", StoreKVF16: "bbbba", StoreKVF32: "bbbba", AttendF16: "bbbbba", AttendF32: "bbbbba", ArgMax: "bba",
	GatedConv: "bbbbba",
}

// Args is the number of 32-bit fields (int or float) of id's argument
// structure, which the host sends with setBytes in the structure's order.
func (id ID) Args() int {
	if id >= 0 && id < numFixed {
		return fixedArgs[id]
	}
	if _, _, k, _ := id.weight(); k == Embed {
		return 2 // EmbedArgs
	}
	return 6 // MVArgs
}

var fixedArgs = [numFixed]int{
	QuantizeQ8_0: 1, QuantizeQ8_1: 1, QuantizeQ8_K: 1, // QuantArgs
	RMSNorm: 3, AddRMSNorm: 2, // NormArgs, AddNormArgs
	Add: 4, Scale: 4, Softcap: 4, AddBias: 4, GLU: 4, // ElemArgs
	RoPE: 6, StoreKVF16: 5, StoreKVF32: 5, AttendF16: 10, AttendF32: 10, ArgMax: 1,
	GatedConv: 6, // ConvArgs
}

// Threadgroup memory the kernels take, in bytes.
const (
	// ReduceBytes: rms_norm, add_rms_norm, argmax, and attention's
	// second (64 floats).
	ReduceBytes = 64 * 4
	// AttendQueryBytes: attention's first, the query (MaxHeadDim floats).
	AttendQueryBytes = MaxHeadDim * 4
	// MatMulBytes: a simdgroup-matrix product's tiles, 640 floats per
	// SIMD group.
	MatMulBytes = 4 * 640 * 4
)

// Threadgroup is the threadgroup memory lengths id takes, by index.
func (id ID) Threadgroup() []int {
	switch id {
	case RMSNorm, AddRMSNorm, ArgMax:
		return []int{ReduceBytes}
	case AttendF16, AttendF32:
		return []int{AttendQueryBytes, ReduceBytes}
	}
	if t, _, k, ok := id.weight(); ok && k == MatMul && !isFloat(t) {
		return []int{MatMulBytes}
	}
	return nil
}

// Kernel constants shared with the sources.
const (
	// MatVecRows is the weight rows per mat-vec threadgroup (a SIMD group
	// each: MV_ROWS).
	MatVecRows = 4
	// BatchRows is the activation rows a mv8 SIMD group takes.
	BatchRows = 8
	// MatMulRows and MatMulTokens are a simdgroup-matrix threadgroup's
	// weight and activation rows (MM_ROWS, MM_TOKENS).
	MatMulRows   = 32
	MatMulTokens = 8
	// MaxHeadDim bounds an attention head (ATT_MAX_HEAD).
	MaxHeadDim = 256
	// MaxMats is how many matrices one matrix dispatch covers.
	MaxMats = 3
	// ConvMaxKernel bounds gated_conv's taps (CONV_MAX_KERNEL).
	ConvMaxKernel = 64
	// MaxThreads is the most threads per threadgroup any dispatch uses
	// (argmax); pipelines that allow fewer take argmax at their limit.
	MaxThreads = 1024
)

// Shape is a dispatch: threadgroups, and threads per threadgroup.
type Shape struct{ Groups, Threads mtl.Size }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func size(w, h, d int) mtl.Size { return mtl.Size{W: w, H: h, D: d} }

// Check reports a shape Metal would refuse on a pipeline allowing
// maxThreads per threadgroup.
func (s Shape) Check(maxThreads int) error {
	g, t := s.Groups, s.Threads
	switch {
	case g.W <= 0 || g.H <= 0 || g.D <= 0 || t.W <= 0 || t.H <= 0 || t.D <= 0:
		return fmt.Errorf("kernels: empty dispatch %v × %v", g, t)
	case t.Threads() > maxThreads:
		return fmt.Errorf("kernels: %d threads per threadgroup exceed the pipeline's %d", t.Threads(), maxThreads)
	case int64(g.W)*int64(t.W) > 1<<32-1 || int64(g.H)*int64(t.H) > 1<<32-1 || int64(g.D)*int64(t.D) > 1<<32-1:
		return fmt.Errorf("kernels: grid %v × %v exceeds 2^32 threads a dimension", g, t)
	}
	return nil
}

// Elementwise covers n elements with 256-thread threadgroups.
func Elementwise(n int) Shape { return Shape{size(ceilDiv(n, 256), 1, 1), size(256, 1, 1)} }

// Quantize covers nblocks activation blocks: a SIMD group per block,
// eight per 256-thread threadgroup for Q8_0/Q8_1, four per 128 for Q8_K.
func Quantize(id ID, nblocks int) Shape {
	if id == QuantizeQ8_K {
		return Shape{size(ceilDiv(nblocks, 4), 1, 1), size(128, 1, 1)}
	}
	return Shape{size(ceilDiv(nblocks, 8), 1, 1), size(256, 1, 1)}
}

// MatKind is the kernel kind for nx activation rows: MatMul from two.
func MatKind(nx int) WeightKind {
	if nx > 1 {
		return MatMul
	}
	return MatVec
}

// MatShape covers the rows of up to MaxMats matrices of type t and nx
// activation rows with the kernel MatKind picks.
func MatShape(t quant.Type, rows [MaxMats]int, nx int) Shape {
	per, perX := MatVecRows, 1
	if MatKind(nx) == MatMul {
		if isFloat(t) {
			perX = BatchRows
		} else {
			per, perX = MatMulRows, MatMulTokens
		}
	}
	groups := 0
	for _, n := range rows {
		groups += ceilDiv(n, per)
	}
	return Shape{size(groups, ceilDiv(nx, perX), 1), size(128, 1, 1)}
}

// EmbedShape covers n rows of cols elements.
func EmbedShape(cols, n int) Shape { return Shape{size(ceilDiv(cols, 256), n, 1), size(256, 1, 1)} }

// RMSNormShape is a 256-thread threadgroup per group of each row.
func RMSNormShape(rows, cols, group int) Shape {
	return Shape{size(cols/group, rows, 1), size(256, 1, 1)}
}

// RoPEShape is a 128-thread threadgroup per row of each of tensors (1 or
// 2) tensors.
func RoPEShape(rows, tensors int) Shape { return Shape{size(rows, 1, tensors), size(128, 1, 1)} }

// StoreKVShape covers the wider of a row's keys and values, for each row,
// keys and values apart.
func StoreKVShape(rows, kd, vd int) Shape {
	return Shape{size(ceilDiv(max(kd, vd), 256), rows, 2), size(256, 1, 1)}
}

// AttendShape is a 256-thread threadgroup per head and query row.
func AttendShape(heads, rows int) Shape { return Shape{size(heads, rows, 1), size(256, 1, 1)} }

// AttendChunk is how many query rows one attention dispatch takes so that
// their scores (capacity floats per row and head) fit budget bytes: at
// least one.
func AttendChunk(rows, heads, capacity, budget int) int {
	per := heads * capacity * 4
	return max(1, min(rows, budget/max(per, 1), 65535))
}

// ArgMaxShape is one threadgroup of as many threads as the pipeline
// allows, up to MaxThreads, in whole SIMD groups.
func ArgMaxShape(maxThreads int) Shape {
	n := min(MaxThreads, maxThreads) &^ 31
	return Shape{size(1, 1, 1), size(max(n, 32), 1, 1)}
}
