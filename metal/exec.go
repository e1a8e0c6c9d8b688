package metal

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/metal/kernels"
)

const (
	// maxBinds bounds a kernel's [[buffer(n)]] slots (the matrix kernels
	// use 0 … 9); maxArgs its argument structure's fields.
	maxBinds = 10
	maxArgs  = 10
	// maxOps bounds a recording; a longer one is committed in parts.
	maxOps = 8192
)

// op is one recorded dispatch: the kernel, its buffer bindings by index
// (the argument structure's slot left empty), the structure's fields, the
// bytes of a data slot (token ids), and the threadgroups.
type op struct {
	id    kernels.ID
	binds [maxBinds]bind
	args  [maxArgs]uint32
	data  []byte
	shape kernels.Shape
}

// Argument encodings: int32 and float32 fields of the argument structure.
func i32(v int) uint32 {
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(fmt.Sprintf("metal: %d does not fit a kernel's int", v))
	}
	return uint32(int32(v))
}

func f32(v float32) uint32 { return math.Float32bits(v) }

// dispatch records kernel id over shape with its buffers (in index order,
// skipping the argument slot) and the argument structure's fields.
func (b *Backend) dispatch(id kernels.ID, shape kernels.Shape, binds []bind, args ...uint32) {
	b.record(b.op(id, shape, binds, args...))
}

// op builds a dispatch, checking it against the kernel's contract.
func (b *Backend) op(id kernels.ID, shape kernels.Shape, binds []bind, args ...uint32) op {
	layout := id.Binding()
	if len(args) != id.Args() {
		panic(fmt.Sprintf("metal: %s takes %d arguments, got %d", id, id.Args(), len(args)))
	}
	if err := shape.Check(b.pipes[id].MaxThreads()); err != nil {
		panic(fmt.Sprintf("metal: %s: %v", id, err))
	}
	o := op{id: id, shape: shape}
	copy(o.args[:], args)
	n := 0
	for i, c := range layout {
		if c == 'b' {
			if n >= len(binds) || binds[n].buf == nil {
				panic(fmt.Sprintf("metal: %s: no buffer for buffer(%d)", id, i))
			}
			o.binds[i] = binds[n]
			n++
		}
	}
	if n != len(binds) {
		panic(fmt.Sprintf("metal: %s binds %d buffers, got %d", id, n, len(binds)))
	}
	return o
}

func (b *Backend) record(o op) {
	if len(b.ops) >= maxOps {
		must(b.sync())
	}
	b.ops = append(b.ops, o)
}

// sync commits the recording as one command buffer and waits for it;
// then the buffers cleanups handed back are released. With b locked.
func (b *Backend) sync() error {
	ops := b.ops
	b.ops = ops[:0]
	b.act.valid = false // the next step quantises its own inputs
	var err error
	if len(ops) > 0 {
		err = b.dev.Step(func() error { return b.run(ops) })
		clear(ops) // let go of the bindings
	}
	b.releaseFreed()
	return err
}

// run encodes ops into one command buffer, one compute encoder, commits
// it and waits. Within a Step: on an autorelease pool and a locked OS
// thread.
func (b *Backend) run(ops []op) error {
	cb, err := b.dev.NewCommandBuffer()
	if err != nil {
		return err
	}
	enc := cb.Encoder()
	for i := range ops {
		o := &ops[i]
		enc.SetPipeline(b.pipes[o.id])
		for idx, c := range o.id.Binding() {
			switch c {
			case 'b':
				enc.SetBuffer(idx, o.binds[idx].buf, o.binds[idx].off)
			case 'a':
				n := o.id.Args()
				b.argBuf = b.argBuf[:0]
				for _, v := range o.args[:n] {
					b.argBuf = binary.LittleEndian.AppendUint32(b.argBuf, v)
				}
				enc.SetBytes(idx, b.argBuf)
				b.stats.SetBytesBytes += int64(len(b.argBuf))
			case 'd':
				enc.SetBytes(idx, o.data)
				b.stats.SetBytesBytes += int64(len(o.data))
			}
		}
		for idx, n := range o.id.Threadgroup() {
			enc.SetThreadgroupMemory(idx, n)
		}
		enc.Dispatch(o.shape.Groups, o.shape.Threads)
	}
	cb.Commit()
	b.stats.Steps++
	b.stats.Dispatches += int64(len(ops))
	if err := cb.Wait(); err != nil {
		return fmt.Errorf("a step of %d dispatches: %w", len(ops), err)
	}
	return nil
}
