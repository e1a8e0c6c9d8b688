//go:build darwin && arm64

package mtl

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// The Objective-C runtime and Metal.framework, loaded once. Messages are
// sent through objc_msgSend with purego.SyscallN, which needs no
// reflection per call: a decode step encodes hundreds of dispatches.
// Selectors are registered once (sel_registerName takes the runtime's
// global lock).
var rt struct {
	once    sync.Once
	err     error
	msgSend uintptr
	create  uintptr // MTLCreateSystemDefaultDevice
	push    uintptr // objc_autoreleasePoolPush
	pop     uintptr // objc_autoreleasePoolPop

	nsString, compileOptions, processInfo objc.Class

	alloc, init, release, respondsTo, device                           objc.SEL
	initWithBytes, utf8String, localizedDescription                    objc.SEL
	processInfoSel, atLeastVersion                                     objc.SEL
	name, workingSet, unified, maxBufferLength, maxTGMemory            objc.SEL
	newCommandQueue, newLibrary, setLanguageVersion, languageVersion   objc.SEL
	setFastMath, setMathMode, newFunction, newPipeline                 objc.SEL
	maxThreads, executionWidth                                         objc.SEL
	newBuffer, newBufferNoCopy, contents, length                       objc.SEL
	commandBuffer, computeEncoder, endEncoding, commit, waitCompleted  objc.SEL
	status, errorSel                                                   objc.SEL
	setPipeline, setBuffer, setBytes, setTGMemory, dispatchThreadgroup objc.SEL
}

func load() error {
	rt.once.Do(func() { rt.err = loadOnce() })
	return rt.err
}

func loadOnce() error {
	// A command-line process must load CoreGraphics for
	// MTLCreateSystemDefaultDevice to find a device.
	if _, err := purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
		return fmt.Errorf("%w: CoreGraphics: %w", ErrUnavailable, err)
	}
	metal, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("%w: Metal.framework: %w", ErrUnavailable, err)
	}
	if rt.create, err = purego.Dlsym(metal, "MTLCreateSystemDefaultDevice"); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	lib, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("%w: libobjc: %w", ErrUnavailable, err)
	}
	for _, s := range []struct {
		p    *uintptr
		name string
	}{{&rt.msgSend, "objc_msgSend"}, {&rt.push, "objc_autoreleasePoolPush"}, {&rt.pop, "objc_autoreleasePoolPop"}} {
		if *s.p, err = purego.Dlsym(lib, s.name); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	rt.nsString = objc.GetClass("NSString")
	rt.compileOptions = objc.GetClass("MTLCompileOptions")
	rt.processInfo = objc.GetClass("NSProcessInfo")
	if rt.nsString == 0 || rt.compileOptions == 0 || rt.processInfo == 0 {
		return fmt.Errorf("%w: Foundation or Metal classes missing", ErrUnavailable)
	}
	for _, s := range []struct {
		p    *objc.SEL
		name string
	}{
		{&rt.alloc, "alloc"}, {&rt.init, "init"}, {&rt.release, "release"}, {&rt.device, "device"},
		{&rt.respondsTo, "respondsToSelector:"},
		{&rt.initWithBytes, "initWithBytes:length:encoding:"}, {&rt.utf8String, "UTF8String"},
		{&rt.localizedDescription, "localizedDescription"},
		{&rt.processInfoSel, "processInfo"}, {&rt.atLeastVersion, "isOperatingSystemAtLeastVersion:"},
		{&rt.name, "name"}, {&rt.workingSet, "recommendedMaxWorkingSetSize"}, {&rt.unified, "hasUnifiedMemory"},
		{&rt.maxBufferLength, "maxBufferLength"}, {&rt.maxTGMemory, "maxThreadgroupMemoryLength"},
		{&rt.newCommandQueue, "newCommandQueue"}, {&rt.newLibrary, "newLibraryWithSource:options:error:"},
		{&rt.setLanguageVersion, "setLanguageVersion:"}, {&rt.languageVersion, "languageVersion"},
		{&rt.setFastMath, "setFastMathEnabled:"}, {&rt.setMathMode, "setMathMode:"},
		{&rt.newFunction, "newFunctionWithName:"}, {&rt.newPipeline, "newComputePipelineStateWithFunction:error:"},
		{&rt.maxThreads, "maxTotalThreadsPerThreadgroup"}, {&rt.executionWidth, "threadExecutionWidth"},
		{&rt.newBuffer, "newBufferWithLength:options:"}, {&rt.newBufferNoCopy, "newBufferWithBytesNoCopy:length:options:deallocator:"},
		{&rt.contents, "contents"}, {&rt.length, "length"},
		{&rt.commandBuffer, "commandBuffer"}, {&rt.computeEncoder, "computeCommandEncoder"},
		{&rt.endEncoding, "endEncoding"}, {&rt.commit, "commit"}, {&rt.waitCompleted, "waitUntilCompleted"},
		{&rt.status, "status"}, {&rt.errorSel, "error"},
		{&rt.setPipeline, "setComputePipelineState:"}, {&rt.setBuffer, "setBuffer:offset:atIndex:"},
		{&rt.setBytes, "setBytes:length:atIndex:"}, {&rt.setTGMemory, "setThreadgroupMemoryLength:atIndex:"},
		{&rt.dispatchThreadgroup, "dispatchThreadgroups:threadsPerThreadgroup:"},
	} {
		*s.p = objc.RegisterName(s.name)
	}
	return nil
}

// send sends a message whose arguments are integers or object ids.
func send(id uintptr, sel objc.SEL, args ...uintptr) uintptr {
	var r uintptr
	switch len(args) {
	case 0:
		r, _, _ = purego.SyscallN(rt.msgSend, id, uintptr(sel))
	case 1:
		r, _, _ = purego.SyscallN(rt.msgSend, id, uintptr(sel), args[0])
	case 2:
		r, _, _ = purego.SyscallN(rt.msgSend, id, uintptr(sel), args[0], args[1])
	default:
		r, _, _ = purego.SyscallN(rt.msgSend, append([]uintptr{id, uintptr(sel)}, args...)...)
	}
	return r
}

func sendBool(id uintptr, sel objc.SEL, args ...uintptr) bool {
	return send(id, sel, args...)&0xff != 0
}

func release(id uintptr) {
	if id != 0 {
		send(id, rt.release)
	}
}

// nsString makes an NSString of s; the caller releases it.
func nsString(s string) uintptr {
	b := append([]byte(s), 0)
	const utf8 = 4 // NSUTF8StringEncoding
	obj := send(uintptr(rt.nsString), rt.alloc)
	r, _, _ := purego.SyscallN(rt.msgSend, obj, uintptr(rt.initWithBytes), uintptr(unsafe.Pointer(&b[0])), uintptr(len(s)), utf8)
	runtime.KeepAlive(b)
	return r
}

// goString reads an NSString.
func goString(ns uintptr) string {
	if ns == 0 {
		return ""
	}
	p := send(ns, rt.utf8String)
	if p == 0 {
		return ""
	}
	n := 0
	c := ptrOf(p)
	for *(*byte)(unsafe.Add(c, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(c), n))
}

// ptrOf is the address u holds, as a pointer: memory Metal or the
// Objective-C runtime owns, outside Go's heap.
func ptrOf(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }

// errorText is an NSError's localizedDescription.
func errorText(nsErr uintptr) string {
	if nsErr == 0 {
		return "no error object"
	}
	return goString(send(nsErr, rt.localizedDescription))
}

// withPool runs f in an autorelease pool on a locked OS thread.
func withPool(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, _, _ := purego.SyscallN(rt.push)
	defer purego.SyscallN(rt.pop, p)
	return f()
}

type device struct {
	id, queue uintptr
	info      Info
}

// SystemDefault opens the system's default Metal device
// (MTLCreateSystemDefaultDevice) and a command queue on it.
func SystemDefault() (Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	id, _, _ := purego.SyscallN(rt.create)
	if id == 0 {
		return nil, fmt.Errorf("%w: MTLCreateSystemDefaultDevice found no device", ErrUnavailable)
	}
	d := &device{id: id}
	err := withPool(func() error {
		d.info = Info{
			Name:                 goString(send(id, rt.name)),
			WorkingSet:           uint64(send(id, rt.workingSet)),
			Unified:              sendBool(id, rt.unified),
			MaxBufferLength:      int(send(id, rt.maxBufferLength)),
			PageSize:             os.Getpagesize(),
			MaxThreadgroupMemory: int(send(id, rt.maxTGMemory)),
		}
		d.queue = send(id, rt.newCommandQueue)
		if d.queue == 0 {
			return fmt.Errorf("mtl: %s: newCommandQueue failed", d.info.Name)
		}
		return nil
	})
	if err != nil {
		release(id)
		return nil, err
	}
	return d, nil
}

func (d *device) Info() Info { return d.info }

func (d *device) Step(f func() error) error { return withPool(f) }

func (d *device) Close() error {
	release(d.queue)
	release(d.id)
	d.queue, d.id = 0, 0
	return nil
}

// languageFor picks the newest MSL version the running macOS compiles:
// 3.2 on macOS 15, 3.1 on 14, 3.0 on 13. A CGO_ENABLED=0 binary carries no
// usable LC_BUILD_VERSION, so without an explicit version Metal assumes
// MSL 2.4 (golang/go#77917).
func languageFor() (version uintptr, name string, err error) {
	pi := send(uintptr(rt.processInfo), rt.processInfoSel)
	atLeast := func(major int) bool {
		v := [3]int64{int64(major), 0, 0} // NSOperatingSystemVersion, passed by reference (24 bytes)
		r, _, _ := purego.SyscallN(rt.msgSend, pi, uintptr(rt.atLeastVersion), uintptr(unsafe.Pointer(&v)))
		return r&0xff != 0
	}
	switch {
	case atLeast(15):
		return 3<<16 | 2, "3.2", nil
	case atLeast(14):
		return 3<<16 | 1, "3.1", nil
	case atLeast(13):
		return 3 << 16, "3.0", nil
	}
	return 0, "", fmt.Errorf("%w: the kernels need MSL 3.0 (macOS 13 or later)", ErrUnavailable)
}

type library struct {
	id   uintptr
	lang string
}

func (d *device) NewLibrary(source string) (Library, error) {
	var lib *library
	err := withPool(func() error {
		version, name, err := languageFor()
		if err != nil {
			return err
		}
		opts := send(send(uintptr(rt.compileOptions), rt.alloc), rt.init)
		defer release(opts)
		send(opts, rt.setLanguageVersion, version)
		send(opts, rt.setFastMath, 0) // safe math, precise functions
		if sendBool(opts, rt.respondsTo, uintptr(rt.setMathMode)) {
			send(opts, rt.setMathMode, 0) // MTLMathModeSafe
		}
		if got := send(opts, rt.languageVersion); got != version {
			return fmt.Errorf("mtl: asked for MSL %s (%#x), the options hold %#x", name, version, got)
		}
		src := nsString(source)
		defer release(src)
		var nsErr uintptr
		id, _, _ := purego.SyscallN(rt.msgSend, d.id, uintptr(rt.newLibrary), src, opts, uintptr(unsafe.Pointer(&nsErr)))
		if id == 0 {
			return fmt.Errorf("mtl: compiling the kernels as MSL %s: %s", name, errorText(nsErr))
		}
		lib = &library{id: id, lang: name}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lib, nil
}

func (l *library) Language() string { return l.lang }
func (l *library) Release()         { release(l.id) }

type pipeline struct {
	id         uintptr
	name       string
	max, width int
}

func (l *library) Pipeline(name string) (Pipeline, error) {
	var p *pipeline
	err := withPool(func() error {
		ns := nsString(name)
		defer release(ns)
		fn := send(l.id, rt.newFunction, ns)
		if fn == 0 {
			return fmt.Errorf("mtl: no kernel %s in the library", name)
		}
		defer release(fn)
		var nsErr uintptr
		// The device is the function's: newComputePipelineState is sent
		// to it.
		dev := send(fn, rt.device)
		id, _, _ := purego.SyscallN(rt.msgSend, dev, uintptr(rt.newPipeline), fn, uintptr(unsafe.Pointer(&nsErr)))
		if id == 0 {
			return fmt.Errorf("mtl: pipeline %s: %s", name, errorText(nsErr))
		}
		p = &pipeline{id: id, name: name, max: int(send(id, rt.maxThreads)), width: int(send(id, rt.executionWidth))}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pipeline) Name() string    { return p.name }
func (p *pipeline) MaxThreads() int { return p.max }
func (p *pipeline) SIMDWidth() int  { return p.width }
func (p *pipeline) Release()        { release(p.id) }

type buffer struct {
	id  uintptr
	ptr unsafe.Pointer
	n   int
}

func (b *buffer) Contents() unsafe.Pointer { return b.ptr }
func (b *buffer) Len() int                 { return b.n }
func (b *buffer) Release()                 { release(b.id); b.id = 0 }

const storageShared = 0 // MTLResourceStorageModeShared, default hazard tracking

func (d *device) NewBuffer(n int) (Buffer, error) {
	if n <= 0 || n > d.info.MaxBufferLength {
		return nil, fmt.Errorf("mtl: a buffer of %d bytes (the device makes at most %d)", n, d.info.MaxBufferLength)
	}
	id := send(d.id, rt.newBuffer, uintptr(n), storageShared)
	if id == 0 {
		return nil, fmt.Errorf("mtl: newBufferWithLength %d failed: out of memory", n)
	}
	return &buffer{id: id, ptr: ptrOf(send(id, rt.contents)), n: n}, nil
}

func (d *device) NewBufferNoCopy(p unsafe.Pointer, n int) (Buffer, error) {
	pg := uintptr(d.info.PageSize)
	if uintptr(p)%pg != 0 || uintptr(n)%pg != 0 || n <= 0 || n > d.info.MaxBufferLength {
		return nil, fmt.Errorf("mtl: a no-copy buffer of %d bytes at %p (want whole %d-byte pages, at most %d)", n, p, pg, d.info.MaxBufferLength)
	}
	id, _, _ := purego.SyscallN(rt.msgSend, d.id, uintptr(rt.newBufferNoCopy), uintptr(p), uintptr(n), storageShared, 0)
	if id == 0 {
		return nil, fmt.Errorf("mtl: newBufferWithBytesNoCopy of %d bytes failed", n)
	}
	return &buffer{id: id, ptr: p, n: n}, nil
}

// commandBuffer and its encoder are autoreleased: valid inside the Step
// that made them.
type commandBuffer struct {
	id, enc uintptr
	e       encoder
}

func (d *device) NewCommandBuffer() (CommandBuffer, error) {
	id := send(d.queue, rt.commandBuffer)
	if id == 0 {
		return nil, fmt.Errorf("mtl: the queue made no command buffer")
	}
	return &commandBuffer{id: id}, nil
}

func (c *commandBuffer) Encoder() Encoder {
	if c.enc == 0 {
		c.enc = send(c.id, rt.computeEncoder)
		c.e = encoder{id: c.enc}
	}
	return &c.e
}

func (c *commandBuffer) Commit() {
	if c.enc != 0 {
		send(c.enc, rt.endEncoding)
	}
	send(c.id, rt.commit)
}

// Wait waits, then reads the status: a faulting kernel completes the wait
// and leaves MTLCommandBufferStatusError with the reason in error.
func (c *commandBuffer) Wait() error {
	send(c.id, rt.waitCompleted)
	const completed, failed = 4, 5
	switch st := send(c.id, rt.status); st {
	case completed:
		return nil
	case failed:
		return fmt.Errorf("mtl: command buffer failed: %s", errorText(send(c.id, rt.errorSel)))
	default:
		return fmt.Errorf("mtl: command buffer ended in status %d", st)
	}
}

type encoder struct {
	id   uintptr
	pipe uintptr
}

func (e *encoder) SetPipeline(p Pipeline) {
	id := p.(*pipeline).id
	if id != e.pipe {
		send(e.id, rt.setPipeline, id)
		e.pipe = id
	}
}

func (e *encoder) SetBuffer(index int, b Buffer, off int) {
	purego.SyscallN(rt.msgSend, e.id, uintptr(rt.setBuffer), b.(*buffer).id, uintptr(off), uintptr(index))
}

func (e *encoder) SetBytes(index int, p []byte) {
	if len(p) == 0 || len(p) > MaxBytes {
		panic(fmt.Sprintf("mtl: setBytes of %d bytes", len(p)))
	}
	purego.SyscallN(rt.msgSend, e.id, uintptr(rt.setBytes), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(index))
}

func (e *encoder) SetThreadgroupMemory(index, n int) {
	purego.SyscallN(rt.msgSend, e.id, uintptr(rt.setTGMemory), uintptr(n), uintptr(index))
}

// mtlSize is MTLSize: three NSUIntegers, 24 bytes, which arm64 passes by
// reference.
type mtlSize struct{ w, h, d uint64 }

func (e *encoder) Dispatch(groups, threads Size) {
	g := mtlSize{uint64(groups.W), uint64(groups.H), uint64(groups.D)}
	t := mtlSize{uint64(threads.W), uint64(threads.H), uint64(threads.D)}
	purego.SyscallN(rt.msgSend, e.id, uintptr(rt.dispatchThreadgroup), uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(&t)))
}
