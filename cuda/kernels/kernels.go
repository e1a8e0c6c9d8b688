// Package kernels is the CUDA backend's device code: CUDA C sources
// (kernels.cu and the headers it includes) compiled by `make ptx` with
// clang-14 into PTX for sm_72 (Jetson Xavier and up) and sm_80 (Ampere and
// up; the driver JITs it for sm_87 Orin and sm_90 Hopper), committed and
// embedded here. It also states each kernel's contract with the host: its
// parameters (checked against the PTX by the tests) and its launch shape
// (grid and block for a given problem), as pure functions.
package kernels

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"sync"

	"github.com/meshnode/meshnode/gguf/quant"
)

// The PTX is committed gzipped: 3 MB of text a target, half a megabyte so.
// The CUDA device tool carries at most 64 MiB, the tree and two test
// binaries that each embed both targets.
var (
	//go:embed kernels.sm_72.ptx.gz
	ptx72gz []byte
	//go:embed kernels.sm_80.ptx.gz
	ptx80gz []byte
)

// archs unpacks the targets once, at first use.
var archs = sync.OnceValue(func() []Arch {
	return []Arch{{"sm_80", 8, 0, gunzip(ptx80gz)}, {"sm_72", 7, 2, gunzip(ptx72gz)}}
})

// gunzip unpacks an embedded module; the build's own file, so a failure is
// a broken build.
func gunzip(b []byte) []byte {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		panic(fmt.Sprintf("kernels: embedded PTX: %v", err))
	}
	out, err := io.ReadAll(r)
	if err != nil {
		panic(fmt.Sprintf("kernels: embedded PTX: %v", err))
	}
	return out
}

// Arch is a PTX target the module is built for.
type Arch struct {
	Name         string // "sm_80"
	Major, Minor int
	PTX          []byte
}

// Archs are the built targets, newest first.
func Archs() []Arch {
	return append([]Arch(nil), archs()...)
}

// ForDevice picks the newest target a device of compute capability
// major.minor runs: PTX for sm_XY is JIT-compiled for any device of
// capability X.Y or later.
func ForDevice(major, minor int) (Arch, error) {
	for _, a := range Archs() {
		if major > a.Major || (major == a.Major && minor >= a.Minor) {
			return a, nil
		}
	}
	return Arch{}, fmt.Errorf("kernels: compute capability %d.%d is below 7.2, the oldest this build targets", major, minor)
}

// ID names a kernel.
type ID int

// The kernels that do not depend on a weight type. Each weight type then
// has six: MatVec (one activation row per warp), MatVec2 (two), MatVec4
// (four), MatVecBatch (eight), Embed and MatVecGather; see WeightKernel.
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
	TopProb
	// rms_norm of whole rows and add_rms_norm, each then quantising its
	// output for the next product: Q8_0, Q8_1, Q8_K, in this order.
	RMSNormQ8_0
	RMSNormQ8_1
	RMSNormQ8_K
	AddRMSNormQ8_0
	AddRMSNormQ8_1
	AddRMSNormQ8_K
	GLUQ8_0 // glu, then quantising its output: Q8_0, Q8_1, Q8_K, in this order
	GLUQ8_1
	GLUQ8_K
	// gpt-oss's (gptoss.cuh).
	GLUOAI
	AttendSinksF16
	AttendSinksF32
	// Qwen3.5's delta net (delta.cuh).
	ShortConv
	DeltaScan
	SigmoidMul
	// LFM2's gated short convolution (delta.cuh).
	GatedConv
	// A mixture of experts' routing, biases and sum (moe.cuh).
	MoERoute
	MoEBias
	MoESum
	// Attention over a long context in three launches (ops.cuh): F16
	// then F32 cache, each.
	AttendScoresF16
	AttendScoresF32
	AttendSoftmaxF16
	AttendSoftmaxF32
	AttendValuesF16
	AttendValuesF32
	numFixed
)

// Parameter kinds in a signature: p a device pointer (.u64), i an int32
// (.u32), f a float32 (.f32).
var fixed = [numFixed]struct{ name, params string }{
	QuantizeQ8_0: {"quantize_q8_0", "pppi"},
	QuantizeQ8_1: {"quantize_q8_1", "ppppi"},
	QuantizeQ8_K: {"quantize_q8_k", "ppppi"},
	RMSNorm:      {"rms_norm", "pppiif"},
	AddRMSNorm:   {"add_rms_norm", "ppppif"},
	Add:          {"add", "ppi"},
	Scale:        {"scale", "pfi"},
	Softcap:      {"softcap", "pfi"},
	AddBias:      {"add_bias", "ppii"},
	GLU:          {"glu", "pppii"},
	RoPE:         {"rope", "ppppiiiii"},
	StoreKVF16:   {"store_kv_f16", "pppppiiii"},
	StoreKVF32:   {"store_kv_f32", "pppppiiii"},
	AttendF16:    {"attend_f16", "ppppppiiiiiiffi"},
	AttendF32:    {"attend_f32", "ppppppiiiiiiffi"},
	ArgMax:       {"argmax", "pip"},
	TopProb:      {"top_prob", "pipp"},

	RMSNormQ8_0:    {"rms_norm_q8_0", "pppifppp"},
	RMSNormQ8_1:    {"rms_norm_q8_1", "pppifppp"},
	RMSNormQ8_K:    {"rms_norm_q8_k", "pppifppp"},
	AddRMSNormQ8_0: {"add_rms_norm_q8_0", "ppppifppp"},
	AddRMSNormQ8_1: {"add_rms_norm_q8_1", "ppppifppp"},
	AddRMSNormQ8_K: {"add_rms_norm_q8_k", "ppppifppp"},
	GLUQ8_0:        {"glu_q8_0", "pppiippp"},
	GLUQ8_1:        {"glu_q8_1", "pppiippp"},
	GLUQ8_K:        {"glu_q8_k", "pppiippp"},

	GLUOAI:         {"glu_oai", "pppi"},
	AttendSinksF16: {"attend_sinks_f16", "ppppppiiiiiiffip"},
	AttendSinksF32: {"attend_sinks_f32", "ppppppiiiiiiffip"},
	ShortConv:      {"short_conv", "pppii"},
	DeltaScan:      {"delta_scan", "pppppppppiiif"},
	SigmoidMul:     {"sigmoid_mul", "ppiii"},
	GatedConv:      {"gated_conv", "ppppii"},
	MoERoute:       {"moe_route", "ppppiiii"},
	MoEBias:        {"moe_bias", "pppii"},
	MoESum:         {"moe_sum", "pppppiii"},

	AttendScoresF16:  {"attend_scores_f16", "ppppiiiiiffip"},
	AttendScoresF32:  {"attend_scores_f32", "ppppiiiiiffip"},
	AttendSoftmaxF16: {"attend_softmax_f16", "ppiiiiipip"},
	AttendSoftmaxF32: {"attend_softmax_f32", "ppiiiiipip"},
	AttendValuesF16:  {"attend_values_f16", "ppppiiiiii"},
	AttendValuesF32:  {"attend_values_f32", "ppppiiiiii"},
}

// WeightKind is one of a weight type's kernels.
type WeightKind int

// A weight type's kernels.
const (
	MatVec       WeightKind = iota // y = x·wᵀ, one activation row per warp
	MatVecBatch                    // the same, eight activation rows per warp
	Embed                          // rows of the table, dequantised
	MatVecGather                   // y = x·wᵀ by the expert each row chose
	MatVec2                        // MatVec, two activation rows per warp
	MatVec4                        // MatVec, four activation rows per warp
	numWeightKinds
)

// Weight types with kernels, and their names in the kernels' names.
var weightTypes = []struct {
	t    quant.Type
	name string
}{
	{quant.Q4_0, "q4_0"}, {quant.Q4_1, "q4_1"}, {quant.Q5_0, "q5_0"}, {quant.Q5_1, "q5_1"}, {quant.Q8_0, "q8_0"},
	{quant.IQ4_NL, "iq4_nl"}, {quant.Q2_K, "q2_k"}, {quant.Q3_K, "q3_k"}, {quant.Q4_K, "q4_k"}, {quant.Q5_K, "q5_k"},
	{quant.Q6_K, "q6_k"}, {quant.IQ4_XS, "iq4_xs"},
	{quant.F32, "f32"}, {quant.F16, "f16"}, {quant.BF16, "bf16"},
	{quant.MXFP4, "mxfp4"},
}

const (
	matVecParams = "pppiiiiipppppppi"
	embedParams  = "piipp"
	gatherParams = "piiippppppi"
)

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

// Name is the kernel's PTX entry name.
func (id ID) Name() string {
	if id < numFixed {
		return fixed[id].name
	}
	i := int(id - numFixed)
	w := weightTypes[i/int(numWeightKinds)]
	switch WeightKind(i % int(numWeightKinds)) {
	case MatVec:
		return "mv_" + w.name + "_1"
	case MatVecBatch:
		return "mv_" + w.name + "_8"
	case MatVec2:
		return "mv_" + w.name + "_2"
	case MatVec4:
		return "mv_" + w.name + "_4"
	case MatVecGather:
		return "mvx_" + w.name
	}
	return "embed_" + w.name
}

// Params is the kernel's signature: one letter per parameter (see fixed).
func (id ID) Params() string {
	if id < numFixed {
		return fixed[id].params
	}
	switch WeightKind(int(id-numFixed) % int(numWeightKinds)) {
	case Embed:
		return embedParams
	case MatVecGather:
		return gatherParams
	}
	return matVecParams
}

func (id ID) String() string { return id.Name() }
