// Package quant holds ggml's tensor element formats: the block layouts of
// every quantised type (bit-exact with ggml-common.h), dequantisation to
// float32, the reference quantisers that make them, and the dot products of a
// quantised weight row with an activation vector quantised the way llama.cpp
// quantises it for that type.
//
// Every kernel here is plain Go with a fixed, documented summation order (see
// dot.go), so an assembly version can reproduce it bit for bit.
package quant

import (
	"fmt"
	"strings"
)

// Type is a ggml tensor element type; its values are ggml's enum ggml_type,
// which is what a GGUF file stores.
type Type uint32

// The ggml types. Gaps in the numbering are types ggml has removed.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
	NVFP4   Type = 40
	Q1_0    Type = 41
	Q2_0    Type = 42
)

// QK_K is the super-block size of the K-quants and IQ4_XS.
const QK_K = 256

type traits struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
}

// typeTraits is ggml's type_traits (ggml.c): name, block size, block
// bytes.
var typeTraits = map[Type]traits{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 18},
	Q4_1:    {"Q4_1", 32, 20},
	Q5_0:    {"Q5_0", 32, 22},
	Q5_1:    {"Q5_1", 32, 24},
	Q8_0:    {"Q8_0", 32, 34},
	Q8_1:    {"Q8_1", 32, 36},
	Q2_K:    {"Q2_K", QK_K, 84},
	Q3_K:    {"Q3_K", QK_K, 110},
	Q4_K:    {"Q4_K", QK_K, 144},
	Q5_K:    {"Q5_K", QK_K, 176},
	Q6_K:    {"Q6_K", QK_K, 210},
	Q8_K:    {"Q8_K", QK_K, 292},
	IQ2_XXS: {"IQ2_XXS", QK_K, 66},
	IQ2_XS:  {"IQ2_XS", QK_K, 74},
	IQ3_XXS: {"IQ3_XXS", QK_K, 98},
	IQ1_S:   {"IQ1_S", QK_K, 50},
	IQ4_NL:  {"IQ4_NL", 32, 18},
	IQ3_S:   {"IQ3_S", QK_K, 110},
	IQ2_S:   {"IQ2_S", QK_K, 82},
	IQ4_XS:  {"IQ4_XS", QK_K, 136},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", QK_K, 56},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", QK_K, 54},
	TQ2_0:   {"TQ2_0", QK_K, 66},
	MXFP4:   {"MXFP4", 32, 17},
	NVFP4:   {"NVFP4", 64, 36},
	Q1_0:    {"Q1_0", 128, 18},
	Q2_0:    {"Q2_0", 64, 18},
}

// maxType bounds the types ggml defines (every one is below it).
const maxType = 64

// table is typeTraits indexed by type: the sizes are read on every
// product and attention task, where a map's hashing showed in profiles.
var table = func() (a [maxType]traits) {
	for t, tr := range typeTraits {
		a[t] = tr
	}
	return a
}()

// traitsOf is t's traits, and whether ggml defines t.
func traitsOf(t Type) (traits, bool) {
	if t >= maxType {
		return traits{}, false
	}
	tr := table[t]
	return tr, tr.blockSize > 0
}

// Known reports whether t is a type ggml defines, so its block geometry (and
// hence the byte size of a tensor of it) is known.
func (t Type) Known() bool { _, ok := traitsOf(t); return ok }

// Supported reports whether Quantize and Dequantize handle t. (Which types
// VecDot takes as weights is VecDotType's to say.)
func (t Type) Supported() bool {
	_, ok := dequantizers[t]
	return ok || t == F32 || t == F16 || t == BF16
}

// String is ggml's name for t, or "type(N)" for an unknown value.
func (t Type) String() string {
	if tr, ok := traitsOf(t); ok {
		return tr.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements in one block of t (1 for plain
// floats), or 0 for an unknown type.
func (t Type) BlockSize() int { tr, _ := traitsOf(t); return tr.blockSize }

// TypeSize is the number of bytes in one block of t, or 0 for an unknown type.
func (t Type) TypeSize() int { tr, _ := traitsOf(t); return tr.typeSize }

// RowSize is the number of bytes n elements of t occupy. n must be a multiple
// of t's block size.
func (t Type) RowSize(n int) (int, error) {
	tr, ok := traitsOf(t)
	if !ok {
		return 0, fmt.Errorf("quant: unknown type %d", uint32(t))
	}
	if n < 0 || n%tr.blockSize != 0 {
		return 0, fmt.Errorf("quant: %d elements is not a whole number of %s blocks of %d", n, tr.name, tr.blockSize)
	}
	return n / tr.blockSize * tr.typeSize, nil
}

// ParseType maps a ggml type name ("Q4_K", "f16", ...) to its Type.
func ParseType(name string) (Type, bool) {
	for t, tr := range typeTraits {
		if strings.EqualFold(tr.name, name) {
			return t, true
		}
	}
	return 0, false
}

// Types lists every type ggml defines, in enum order.
func Types() []Type {
	var ts []Type
	for t := Type(0); t < maxType; t++ {
		if t.Known() {
			ts = append(ts, t)
		}
	}
	return ts
}
