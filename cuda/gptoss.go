package cuda

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/kernels"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// gpt-oss's kernels beyond the others' (kernels/gptoss.cuh): attention
// with a sink per head and the clamped SwiGLU, the optional features
// model.Load asks for; MXFP4 weights are one more weight type of the
// matrix kernels.

var _ backend.Featured = (*Backend)(nil)

// Supports implements backend.Featured: the CUDA backend has attention
// sinks and gpt-oss's clamped SwiGLU.
func (b *Backend) Supports(f backend.Feature) bool {
	return f == backend.AttentionSinks || f == backend.GLUSwiOAI
}

// gluOAI records GLU with backend.SwiGLUOAI.
func (b *Backend) gluOAI(dst, gate, up backend.Tensor) {
	b.elementwise(kernels.GLUOAI, dst, ptr(dst), ptr(gate), ptr(up), i32(dst.Len()))
}

// sinkKernel is the attention kernel with sinks for a cache of type typ,
// and the device copy of a's sinks. With b locked.
func (b *Backend) sinkKernel(typ quant.Type, a *backend.Attention) (kernels.ID, uint64) {
	if len(a.Sinks) != a.Heads {
		panic(fmt.Sprintf("cuda: %d attention sinks for %d heads", len(a.Sinks), a.Heads))
	}
	id := kernels.AttendSinksF16
	if typ == quant.F32 {
		id = kernels.AttendSinksF32
	}
	return id, b.sinksPtr(a.Sinks)
}

// sinksPtr is the device address of a copy of sinks (constPtr). A
// layer's sinks are the same values every step, so its attention launch
// is too, and the step replays as a graph. With b locked.
func (b *Backend) sinksPtr(sinks []float32) uint64 {
	return b.constPtr(unsafe.Slice((*byte)(unsafe.Pointer(&sinks[0])), 4*len(sinks)))
}

// constPtr is the device address of a copy of data, uploaded the first
// time these bytes are seen. Copies are keyed by value, as RoPE tables are
// (sessions may hold their own slices), and kept for the backend's life:
// a few per layer. With b locked.
func (b *Backend) constPtr(data []byte) uint64 {
	key := unsafe.String(&data[0], len(data)) // aliases data for the lookup
	if m, ok := b.consts[key]; ok {
		return uint64(m.ptr)
	}
	b.bind()
	m, err := b.alloc(len(data))
	must(err)
	must(b.lib.MemcpyHtoD(m.ptr, unsafe.Pointer(&data[0]), len(data)))
	b.consts[strings.Clone(key)] = m
	return uint64(m.ptr)
}
