package cuda

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/cuda/kernels"
)

const (
	// maxParams bounds a kernel's parameters; paramBytes holds their
	// values and the array of pointers to them that cuLaunchKernel takes.
	maxParams  = 16
	paramBytes = maxParams * 16
	// arenaBytes is the initial per-step argument area.
	arenaBytes = 64 << 10
	// maxOps bounds a recording; a longer one is launched in parts.
	maxOps = 8192
	// minGraphOps is the shortest step worth a graph.
	minGraphOps = 8
	// maxGraphs is how many captured steps are kept: a decode step per
	// session that decodes in turn with others, and speculation's steps —
	// the draft's one-token step and catch-up, the target's one-token step
	// and its windows of 2 to 9 rows.
	maxGraphs = 16
	// maxSeen is how many recent uncaptured steps a step is compared
	// with; one seen again among them is captured. Speculation
	// interleaves the draft's steps with the target's windows, so a window
	// never follows its like: compared with the previous step alone, every
	// window launched its kernels one by one (2 rows cost 1.6 one-row
	// steps of a 1B model on an H200, in graphs 1.4), and so did the
	// draft's first step of each round. Capturing on the third sighting
	// instead left the draft's steps dearer (c 0.31–0.34 against 0.25,
	// speculation 1.8–1.9× against 2.0–2.1×) for the sake of a prompt
	// evaluated twice, whose capture costs it a millisecond once.
	maxSeen = 16
)

type opKind uint8

const (
	opLaunch opKind = iota
	opCopy          // device to device: args dst, src, bytes
)

// op is one recorded kernel launch or copy. It is a comparable value, so
// two recordings are the same step exactly when their op slices are equal.
type op struct {
	kind  opKind
	id    kernels.ID
	n     uint8
	shape kernels.Shape
	args  [maxParams]uint64
}

// arena is the page-locked area a step's per-step arguments (positions,
// token ids, small writes) are written to while it is recorded; the step
// uploads it to its device twin first.
type arena struct {
	host unsafe.Pointer
	dev  *devMem
	size int
	used int
	gen  int // bumped when the area moves, which changes every step

	// The positions written in this step, which every layer's RoPE,
	// StoreKV and Attend of a sequence share: a batched step's sequences
	// each take one slot for all layers, in the order first used, so a
	// step over the same sequences lays out its arguments the same way.
	pos map[int32]uint64
}

func (a *arena) init(b *Backend, size int) error {
	host, err := b.lib.MemAllocHost(size)
	if err != nil {
		return err
	}
	dev, err := b.alloc(size)
	if err != nil {
		b.lib.MemFreeHost(host)
		return err
	}
	if a.host != nil {
		must(b.lib.MemFreeHost(a.host))
	}
	a.host, a.dev, a.size, a.used = host, dev, size, 0
	a.gen++
	clear(a.pos)
	return nil
}

func (a *arena) reset() {
	a.used = 0
	clear(a.pos)
}

// recorder is the step being recorded.
type recorder struct {
	ops   []op
	arena arena
}

// reserve returns n bytes of the arena (16-byte aligned) and their device
// address, first launching the recording so far when the arena is full.
func (b *Backend) reserve(n int) (unsafe.Pointer, uint64) {
	a := &b.rec.arena
	need := (n + 15) &^ 15
	if a.used+need > a.size {
		b.bind()
		must(b.sync(false))
		if need > a.size {
			must(a.init(b, max(need, 2*a.size)))
		}
	}
	off := a.used
	a.used += need
	return unsafe.Add(a.host, off), uint64(a.dev.ptr) + uint64(off)
}

// argPos is the device address of the position pos in this step's arena.
func (b *Backend) argPos(pos int) uint64 {
	a := &b.rec.arena
	if d, ok := a.pos[int32(pos)]; ok {
		return d
	}
	h, d := b.reserve(4) // may launch the recording so far, and reset pos
	*(*int32)(h) = int32(pos)
	if a.pos == nil {
		a.pos = map[int32]uint64{}
	}
	a.pos[int32(pos)] = d
	return d
}

// argIDs copies token ids into this step's arena.
func (b *Backend) argIDs(ids []uint32) uint64 {
	h, d := b.reserve(4 * len(ids))
	copy(unsafe.Slice((*uint32)(h), len(ids)), ids)
	return d
}

// Argument encodings: pointers as they are, int32 and float32 in the low
// four bytes (the driver reads four bytes for a .u32 or .f32 parameter).
func i32(v int) uint64 {
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: %d does not fit a kernel's int", v))
	}
	return uint64(uint32(int32(v)))
}

func f32(v float32) uint64 { return uint64(math.Float32bits(v)) }

// launch records kernel id over shape with args (in the kernel's order).
func (b *Backend) launch(id kernels.ID, shape kernels.Shape, args ...uint64) {
	if len(args) != len(id.Params()) {
		panic(fmt.Sprintf("cuda: %s takes %d arguments, got %d", id, len(id.Params()), len(args)))
	}
	if err := shape.Check(); err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", id, err))
	}
	o := op{kind: opLaunch, id: id, n: uint8(len(args)), shape: shape}
	copy(o.args[:], args)
	b.record(o)
}

func (b *Backend) record(o op) {
	if len(b.rec.ops) >= maxOps {
		b.bind()
		must(b.sync(false))
	}
	b.rec.ops = append(b.rec.ops, o)
}

// sync launches the recording and waits for the device; then the arena
// is free again, and with free, memory released by cleanups is freed
// (see freeReleased for when that is safe). With the thread bound.
func (b *Backend) sync(free bool) error {
	err := b.flushErr()
	if e := b.lib.StreamSynchronize(b.stream); err == nil {
		err = e
	}
	b.rec.arena.reset()
	b.exec.destroyDead(b)
	if free {
		b.freeReleased()
	}
	return err
}

// executor launches recordings, by graph where a step repeats.
type executor struct {
	graphs bool
	seen   []seenStep // recent steps launched eagerly
	cache  []*graphEntry
	dead   []*graphEntry // evicted, destroyed at the next sync
	clock  int64         // steps flushed
}

// seenStep is a step launched eagerly: its ops, its argument arena's
// bytes used and generation (a graph replays the arena's device copy),
// and when it was seen.
type seenStep struct {
	ops  []op
	at   [2]int
	last int64
}

type graphEntry struct {
	ops   []op
	at    [2]int
	graph driver.Graph
	exec  driver.GraphExec
	used  int64
}

// flushErr launches the recorded step. With the thread bound.
func (b *Backend) flushErr() error {
	ops := b.rec.ops
	if len(ops) == 0 {
		return nil
	}
	b.act.valid = false // the next step quantises its own inputs
	b.stats.Steps++
	e := &b.exec
	e.clock++
	at := [2]int{b.rec.arena.used, b.rec.arena.gen}
	graphed := e.graphs && len(ops) >= minGraphOps
	var g *graphEntry
	if graphed {
		g = e.find(ops, at)
	}
	var err error
	switch {
	case !graphed:
		err = b.runEager(ops)
	case g != nil:
		g.used = e.clock
		err = b.lib.GraphLaunch(g.exec, b.stream)
		b.stats.Graphs++
	case e.repeats(ops, at):
		err = b.capture(ops, at)
	default:
		err = b.runEager(ops)
	}
	b.rec.ops = ops[:0]
	return err
}

// repeats reports whether the step is one of the recent eager ones (see
// maxSeen), and forgets it there, as it is about to be captured;
// otherwise it remembers the step, forgetting the least recent past
// maxSeen.
func (e *executor) repeats(ops []op, at [2]int) bool {
	for i, s := range e.seen {
		if s.at == at && slices.Equal(s.ops, ops) {
			e.seen = slices.Delete(e.seen, i, i+1)
			return true
		}
	}
	var reuse []op
	if len(e.seen) == maxSeen {
		lru := 0
		for i, s := range e.seen {
			if s.last < e.seen[lru].last {
				lru = i
			}
		}
		reuse = e.seen[lru].ops[:0]
		e.seen = slices.Delete(e.seen, lru, lru+1)
	}
	e.seen = append(e.seen, seenStep{ops: append(reuse, ops...), at: at, last: e.clock})
	return false
}

func (e *executor) find(ops []op, at [2]int) *graphEntry {
	for _, g := range e.cache {
		if g.at == at && slices.Equal(g.ops, ops) {
			return g
		}
	}
	return nil
}

// upload copies the step's arguments to the device.
func (b *Backend) upload() error {
	a := &b.rec.arena
	if a.used == 0 {
		return nil
	}
	return b.lib.MemcpyHtoDAsync(a.dev.ptr, a.host, a.used, b.stream)
}

// issue queues the step's copies and kernels on the stream.
func (b *Backend) issue(ops []op) error {
	if err := b.upload(); err != nil {
		return err
	}
	vals := (*[maxParams]uint64)(b.params)
	ptrs := (*[maxParams]unsafe.Pointer)(unsafe.Add(b.params, maxParams*8))
	for i := range ops {
		o := &ops[i]
		var err error
		switch o.kind {
		case opCopy:
			err = b.lib.MemcpyDtoDAsync(driver.DevicePtr(o.args[0]), driver.DevicePtr(o.args[1]), int(o.args[2]), b.stream)
		default:
			for j := range int(o.n) {
				vals[j] = o.args[j]
				ptrs[j] = unsafe.Pointer(&vals[j])
			}
			err = b.lib.LaunchKernel(b.fns[o.id], o.shape.Grid, o.shape.Block, 0, b.stream, unsafe.Pointer(ptrs))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", o.id, err)
		}
	}
	return nil
}

func (b *Backend) runEager(ops []op) error {
	b.stats.Launches += int64(len(ops))
	return b.issue(ops)
}

// capture records the step as a graph, keeps it, and launches it. If the
// driver cannot, graphs are turned off and the step runs eagerly.
func (b *Backend) capture(ops []op, at [2]int) error {
	l := b.lib
	fail := func(err error) error {
		b.exec.graphs = false
		b.info.Graphs = false
		b.log.Warn("cuda: graph capture failed; launching kernels one by one", "err", err)
		return b.runEager(ops)
	}
	if err := l.StreamBeginCapture(b.stream, driver.CaptureModeRelaxed); err != nil {
		return fail(err)
	}
	issueErr := b.issue(ops)
	g, err := l.StreamEndCapture(b.stream)
	if issueErr != nil || err != nil {
		if g != 0 {
			l.GraphDestroy(g)
		}
		if issueErr != nil {
			return fail(issueErr)
		}
		return fail(err)
	}
	x, err := l.GraphInstantiate(g)
	if err != nil {
		l.GraphDestroy(g)
		return fail(err)
	}
	e := &b.exec
	e.cache = append(e.cache, &graphEntry{ops: slices.Clone(ops), at: at, graph: g, exec: x, used: e.clock})
	if len(e.cache) > maxGraphs {
		lru := 0
		for i, c := range e.cache {
			if c.used < e.cache[lru].used {
				lru = i
			}
		}
		e.dead = append(e.dead, e.cache[lru])
		e.cache = slices.Delete(e.cache, lru, lru+1)
	}
	b.stats.Captures++
	b.stats.Graphs++
	return l.GraphLaunch(x, b.stream)
}

// destroyDead destroys evicted graphs; after a sync.
func (e *executor) destroyDead(b *Backend) {
	for _, g := range e.dead {
		b.lib.GraphExecDestroy(g.exec)
		b.lib.GraphDestroy(g.graph)
	}
	e.dead = nil
}

// destroy destroys every graph; at Close, after a sync.
func (e *executor) destroy(b *Backend) {
	e.dead = append(e.dead, e.cache...)
	e.cache = nil
	e.destroyDead(b)
}
