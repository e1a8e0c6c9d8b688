package host

import (
	"strings"
	"unicode"
)

// chip is a table entry: nominal figures from the vendor's datasheets,
// for chips whose figures cannot be queried.
type chip struct {
	key       string // tokens that must appear, in order and adjacent
	name      string // the GPU's name where the key matched a board or CPU
	arch      string
	bandwidth float64 // GB/s
	fp32      float64 // TFLOPS
	fp16      float64 // TFLOPS, dense matrix (tensor cores where present)
}

// NVIDIA data-centre GPUs, matched on the NVML name. More specific keys
// come first.
var nvidiaChips = []chip{
	{key: "h200", bandwidth: 4800, fp32: 67, fp16: 989},
	{key: "h100 pcie", bandwidth: 2000, fp32: 51, fp16: 756},
	{key: "h100", bandwidth: 3350, fp32: 67, fp16: 989},
	{key: "a100 80gb pcie", bandwidth: 1935, fp32: 19.5, fp16: 312},
	{key: "a100 sxm4 80gb", bandwidth: 2039, fp32: 19.5, fp16: 312},
	{key: "a100", bandwidth: 1555, fp32: 19.5, fp16: 312},
	{key: "l40s", bandwidth: 864, fp32: 91.6, fp16: 362},
	{key: "a10", bandwidth: 600, fp32: 31.2, fp16: 125},
	{key: "l4", bandwidth: 300, fp32: 30.3, fp16: 121},
	{key: "v100 pcie", bandwidth: 900, fp32: 14, fp16: 112},
	{key: "v100", bandwidth: 900, fp32: 15.7, fp16: 125},
	{key: "t4", bandwidth: 320, fp32: 8.1, fp16: 65},
}

// Jetson modules, matched on the device-tree model. FP32 is CUDA cores ×
// 2 × the top GPU clock; FP16 is from the published GPU INT8 figures
// (dense FP16 is a quarter of sparse INT8) where the GPU has tensor cores,
// twice FP32 where it has not.
var jetsonChips = []chip{
	{key: "agx orin", name: "Jetson AGX Orin GPU", arch: "Ampere", bandwidth: 204.8, fp32: 5.3, fp16: 42.5},
	{key: "orin nx", name: "Jetson Orin NX GPU", arch: "Ampere", bandwidth: 102.4, fp32: 1.88, fp16: 25},
	{key: "orin nano", name: "Jetson Orin Nano GPU", arch: "Ampere", bandwidth: 68, fp32: 1.28, fp16: 10},
	{key: "xavier nx", name: "Jetson Xavier NX GPU", arch: "Volta", bandwidth: 59.7, fp32: 0.85},
	{key: "agx xavier", name: "Jetson AGX Xavier GPU", arch: "Volta", bandwidth: 136.5, fp32: 1.41, fp16: 11.3},
	{key: "jetson agx", name: "Jetson AGX Xavier GPU", arch: "Volta", bandwidth: 136.5, fp32: 1.41, fp16: 11.3}, // its model string is "Jetson-AGX"
	{key: "jetson nano", name: "Jetson Nano GPU", arch: "Maxwell", bandwidth: 25.6, fp32: 0.236, fp16: 0.472},
	{key: "tx2", name: "Jetson TX2 GPU", arch: "Pascal", bandwidth: 59.7, fp32: 0.666, fp16: 1.33},
	{key: "quill", name: "Jetson TX2 GPU", arch: "Pascal", bandwidth: 59.7, fp32: 0.666, fp16: 1.33}, // TX2's board name
}

// Apple Silicon, matched on machdep.cpu.brand_string. Apple GPUs run FP16
// at the FP32 rate. Apple has not published TFLOPS for M3 and later, and
// the table does not guess them.
var appleChips = []chip{
	{key: "m1 ultra", bandwidth: 800, fp32: 21.2, fp16: 21.2},
	{key: "m1 max", bandwidth: 400, fp32: 10.4, fp16: 10.4},
	{key: "m1 pro", bandwidth: 200, fp32: 5.2, fp16: 5.2},
	{key: "m1", bandwidth: 68.25, fp32: 2.6, fp16: 2.6},
	{key: "m2 ultra", bandwidth: 800, fp32: 27.2, fp16: 27.2},
	{key: "m2 max", bandwidth: 400, fp32: 13.6, fp16: 13.6},
	{key: "m2 pro", bandwidth: 200, fp32: 6.8, fp16: 6.8},
	{key: "m2", bandwidth: 100, fp32: 3.6, fp16: 3.6},
	{key: "m3 ultra", bandwidth: 819},
	{key: "m3 max", bandwidth: 400},
	{key: "m3 pro", bandwidth: 150},
	{key: "m3", bandwidth: 100},
	{key: "m4 max", bandwidth: 546},
	{key: "m4 pro", bandwidth: 273},
	{key: "m4", bandwidth: 120},
}

// lookup finds the first entry whose key's tokens appear adjacent in
// name's, so that "a10" does not match "A100" nor "m1" match "M10".
func lookup(table []chip, name string) (chip, bool) {
	have := tokens(name)
	for _, c := range table {
		want := tokens(c.key)
		for i := 0; i+len(want) <= len(have); i++ {
			if equal(have[i:i+len(want)], want) {
				return c, true
			}
		}
	}
	return chip{}, false
}

func tokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
