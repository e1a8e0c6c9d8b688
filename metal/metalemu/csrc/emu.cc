// emu.cc: the runtime of the CPU stand-in for a Metal device, for testing
// the Metal backend without a Mac.
//
// The kernels are the MSL sources of metal/kernels compiled as host C++
// through the shim (include/metal_stdlib) in another translation unit,
// with a generated thunk per kernel (emu_kernels). This file runs a
// dispatch: each threadgroup's threads as fibers on the calling thread,
// switching at threadgroup barriers and at every SIMD-group collective, so
// that barriers, shuffles, reductions and simdgroup matrices have their
// GPU meaning. It also gives out the buffers, each ending at a guard page
// so that a kernel reading past one crashes the test rather than reading
// garbage, and threadgroup memory the same way, filled with NaNs before
// each threadgroup (Metal does not clear it).
//
// It refuses what a GPU faults on or leaves undefined: a threadgroup
// barrier some threads cannot reach or reach after others returned; a
// SIMD-group collective some lanes of the group skip, return before, or
// reach at a different collective; a simdgroup matrix load or store whose
// arguments differ between lanes.

#include "include/emu_abi.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

extern "C" const emu_kernel emu_kernels[];
extern "C" const int emu_nkernels;

extern "C" void emu_switch(void **save, void *to);

#if defined(__x86_64__)
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n");
#elif defined(__aarch64__)
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,%function\n"
    "emu_switch:\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n  ret\n");
#else
#error "emu.cc: fibers need x86-64 or arm64"
#endif

namespace {

enum State { READY, AT_BARRIER, AT_SIMD, DONE, FAILED };

const size_t kStack = 64 << 10;
const int kMaxThreads = 1024, kLanes = 32, kMaxGroups = kMaxThreads / kLanes;
const int kMaxTG = 8; // threadgroup memory indices

struct Fiber {
	void *sp;
	char *stack;
	emu_pos pos;
	State state;
	unsigned gen;
};

std::vector<Fiber> fibers;
int current, nthreads;
void *sched_sp;
const emu_kernel *cur_kernel;
void **cur_bufs, **cur_tg;
unsigned long slots[2][kMaxGroups][kLanes];
const char *tags[2][kMaxGroups][kLanes];
char error[512];

void fiber_main() {
	cur_kernel->run(cur_bufs, cur_tg);
	fibers[current].state = DONE;
	emu_switch(&fibers[current].sp, sched_sp);
	abort(); // a finished fiber is never resumed
}

void fiber_init(Fiber &f) {
	if (!f.stack) {
		f.stack = (char *)mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (f.stack == MAP_FAILED) {
			abort();
		}
	}
	uintptr_t top = ((uintptr_t)f.stack + kStack) & ~(uintptr_t)15;
#if defined(__x86_64__)
	// emu_switch pops six registers, then returns into fiber_main with
	// the stack as a call leaves it (rsp ≡ 8 mod 16).
	void **sp = (void **)top;
	*--sp = nullptr;
	*--sp = (void *)fiber_main;
	for (int i = 0; i < 6; i++) {
		*--sp = nullptr;
	}
	f.sp = sp;
#else
	void **sp = (void **)(top - 160);
	memset(sp, 0, 160);
	sp[11] = (void *)fiber_main; // x30
	f.sp = sp;
#endif
}

void yield(State s) {
	Fiber &f = fibers[current];
	f.state = s;
	emu_switch(&f.sp, sched_sp);
}

void fail_with(const char *fmt, const char *a = "", const char *b = "") {
	if (!error[0]) {
		snprintf(error, sizeof error, fmt, a, b);
	}
}

} // namespace

extern "C" const emu_pos *emu_current(void) { return &fibers[current].pos; }

extern "C" void emu_threadgroup_barrier(void) { yield(AT_BARRIER); }

extern "C" void emu_fail(const char *why) {
	fail_with("%s", why);
	yield(FAILED);
	abort(); // a failed fiber is never resumed
}

// emu_collective: alternate generations use alternate slots, so a lane
// that runs ahead into its next collective cannot overwrite a value a
// slower lane has yet to read.
extern "C" const unsigned long *emu_collective(unsigned long v, const char *tag) {
	Fiber &f = fibers[current];
	int par = f.gen & 1;
	f.gen++;
	slots[par][f.pos.sg][f.pos.lane] = v;
	tags[par][f.pos.sg][f.pos.lane] = tag;
	yield(AT_SIMD);
	return slots[par][f.pos.sg];
}

namespace {

// run_group runs every thread of one threadgroup to completion. It
// returns false, with error set, when they cannot all proceed.
bool run_group() {
	for (int t = 0; t < nthreads; t++) {
		Fiber &f = fibers[t];
		f.state = READY;
		f.gen = 0;
		fiber_init(f);
	}
	int nsg = (nthreads + kLanes - 1) / kLanes;
	for (;;) {
		bool ran = false, live = false;
		for (int t = 0; t < nthreads; t++) {
			if (fibers[t].state != READY) {
				continue;
			}
			ran = true;
			current = t;
			emu_switch(&sched_sp, fibers[t].sp);
			if (fibers[t].state == FAILED) {
				return false;
			}
		}
		for (int t = 0; t < nthreads; t++) {
			live |= fibers[t].state != DONE;
		}
		if (!live) {
			return true;
		}
		bool released = false;
		for (int g = 0; g < nsg; g++) {
			int first = g * kLanes, size = nthreads - first < kLanes ? nthreads - first : kLanes;
			int alive = 0, waiting = 0, lead = -1;
			for (int t = first; t < first + size; t++) {
				alive += fibers[t].state != DONE;
				if (fibers[t].state == AT_SIMD) {
					waiting++;
					if (lead < 0) {
						lead = t;
					}
				}
			}
			if (waiting == 0 || waiting != alive) {
				continue;
			}
			int par = (fibers[lead].gen - 1) & 1;
			const char *tag = tags[par][g][fibers[lead].pos.lane];
			if (alive != kLanes) {
				fail_with(alive != size ? "%s in a SIMD group some of whose lanes returned" : "%s in a SIMD group of fewer than 32 threads", tag);
				return false;
			}
			for (int t = first; t < first + size; t++) {
				const char *o = tags[(fibers[t].gen - 1) & 1][g][fibers[t].pos.lane];
				if (fibers[t].gen != fibers[lead].gen || strcmp(o, tag) != 0) {
					fail_with("lanes of one SIMD group at different collectives (%s, %s)", tag, o);
					return false;
				}
			}
			for (int t = first; t < first + size; t++) {
				fibers[t].state = READY;
			}
			released = true;
		}
		if (released) {
			continue;
		}
		int at_barrier = 0, done = 0, waiting_simd = 0;
		for (int t = 0; t < nthreads; t++) {
			at_barrier += fibers[t].state == AT_BARRIER;
			done += fibers[t].state == DONE;
			waiting_simd += fibers[t].state == AT_SIMD;
		}
		if (at_barrier > 0 && at_barrier + done == nthreads) {
			if (done > 0) {
				fail_with("a threadgroup_barrier some threads of the threadgroup never reach: they returned");
				return false;
			}
			for (int t = 0; t < nthreads; t++) {
				fibers[t].state = READY;
			}
			continue;
		}
		if (!ran) {
			fail_with(waiting_simd > 0 ? "a SIMD-group collective some lanes never reach (they wait at a barrier or returned)"
						   : "threads wait at barriers that cannot all be reached");
			return false;
		}
	}
}

// ---- Memory ----

struct Alloc {
	char *map;
	size_t maplen, size;
};

std::mutex mu;
std::map<uintptr_t, Alloc> allocs; // by user address
size_t allocated, mem_limit = (size_t)16 << 30;
long dispatches;

size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }

// guarded places size bytes (rounded up to 16) so that they end at a
// PROT_NONE page.
char *guarded(size_t size, Alloc *out) {
	size_t pg = page(), body = (size + 15) & ~(size_t)15;
	if (body == 0) {
		body = 16;
	}
	size_t len = (body + pg - 1) / pg * pg + pg;
	char *m = (char *)mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		return nullptr;
	}
	mprotect(m + len - pg, pg, PROT_NONE);
	*out = Alloc{m, len, size};
	return m + len - pg - body;
}

// Threadgroup memory, per index, reused between dispatches.
struct TGMem {
	char *p;
	Alloc a;
	size_t n;
} tgmem[kMaxTG];

const emu_kernel *find(const char *name) {
	for (int i = 0; i < emu_nkernels; i++) {
		if (strcmp(emu_kernels[i].name, name) == 0) {
			return &emu_kernels[i];
		}
	}
	return nullptr;
}

} // namespace

#define EXPORT extern "C" __attribute__((visibility("default")))

// mtlemu_kernel returns the index of the named kernel, or -1.
EXPORT int mtlemu_kernel(const char *name) {
	const emu_kernel *k = find(name);
	return k ? (int)(k - emu_kernels) : -1;
}

// mtlemu_ref_size returns the bytes kernel k's reference parameter at
// [[buffer(index)]] reads, 0 for a pointer, -1 when it binds no buffer
// there.
EXPORT long mtlemu_ref_size(int k, int index) {
	if (k < 0 || k >= emu_nkernels) {
		return -1;
	}
	const emu_kernel &e = emu_kernels[k];
	for (int i = 0; i < e.nbinds; i++) {
		if (e.binds[2 * i] == index) {
			return e.binds[2 * i + 1];
		}
	}
	return -1;
}

// mtlemu_alloc gives out n zeroed bytes ending at a guard page, or NULL
// beyond the memory limit.
EXPORT void *mtlemu_alloc(size_t n) {
	std::lock_guard<std::mutex> lock(mu);
	if (n == 0 || allocated + n > mem_limit) {
		return nullptr;
	}
	Alloc a;
	char *p = guarded(n, &a);
	if (!p) {
		return nullptr;
	}
	allocs[(uintptr_t)p] = a;
	allocated += n;
	return p;
}

EXPORT int mtlemu_free(void *p) {
	std::lock_guard<std::mutex> lock(mu);
	auto it = allocs.find((uintptr_t)p);
	if (it == allocs.end()) {
		return -1;
	}
	allocated -= it->second.size;
	munmap(it->second.map, it->second.maplen);
	allocs.erase(it);
	return 0;
}

EXPORT long mtlemu_live(void) {
	std::lock_guard<std::mutex> lock(mu);
	return (long)allocs.size();
}

EXPORT void mtlemu_set_memory(size_t n) {
	std::lock_guard<std::mutex> lock(mu);
	mem_limit = n;
}

EXPORT long mtlemu_dispatches(void) {
	std::lock_guard<std::mutex> lock(mu);
	return dispatches;
}

// mtlemu_dispatch runs kernel k over groups threadgroups of threads
// threads, with bufs bound at [[buffer(i)]] and tglen[i] bytes of
// threadgroup memory at [[threadgroup(i)]]. It returns 0, or -1 with the
// reason in err.
EXPORT int mtlemu_dispatch(int k, void **bufs, const long *tglen, int ntg, const unsigned *groups, const unsigned *threads, char *err,
			   int errlen) {
	std::lock_guard<std::mutex> lock(mu);
	error[0] = 0;
	if (k < 0 || k >= emu_nkernels || ntg < 0 || ntg > kMaxTG) {
		snprintf(err, errlen, "bad dispatch");
		return -1;
	}
	nthreads = (int)(threads[0] * threads[1] * threads[2]);
	if (nthreads <= 0 || nthreads > kMaxThreads || groups[0] == 0 || groups[1] == 0 || groups[2] == 0) {
		snprintf(err, errlen, "%s: dispatch of %u×%u×%u threadgroups of %u×%u×%u threads", emu_kernels[k].name, groups[0], groups[1], groups[2],
			 threads[0], threads[1], threads[2]);
		return -1;
	}
	void *tg[kMaxTG] = {};
	for (int i = 0; i < ntg; i++) {
		size_t n = (size_t)tglen[i];
		if (n == 0) {
			continue;
		}
		if (tgmem[i].n != n) {
			if (tgmem[i].p) {
				munmap(tgmem[i].a.map, tgmem[i].a.maplen);
			}
			tgmem[i].p = guarded(n, &tgmem[i].a);
			tgmem[i].n = n;
		}
		tg[i] = tgmem[i].p;
	}
	if ((int)fibers.size() < nthreads) {
		fibers.resize(nthreads);
	}
	cur_kernel = &emu_kernels[k];
	cur_bufs = bufs;
	cur_tg = tg;
	unsigned nsg = (unsigned)(nthreads + kLanes - 1) / kLanes;
	for (unsigned z = 0; z < groups[2]; z++) {
		for (unsigned y = 0; y < groups[1]; y++) {
			for (unsigned x = 0; x < groups[0]; x++) {
				unsigned g[3] = {x, y, z};
				for (int t = 0; t < nthreads; t++) {
					emu_pos &p = fibers[t].pos;
					unsigned tid[3] = {t % threads[0], t / threads[0] % threads[1], t / (threads[0] * threads[1])};
					for (int d = 0; d < 3; d++) {
						p.tg[d] = g[d];
						p.ntg[d] = threads[d];
						p.tid[d] = tid[d];
						p.groups[d] = groups[d];
						p.gpos[d] = g[d] * threads[d] + tid[d];
						p.ngrid[d] = groups[d] * threads[d];
					}
					p.tindex = t;
					p.lane = t % kLanes;
					p.sg = t / kLanes;
					p.nsg = nsg;
					p.width = kLanes;
				}
				for (int i = 0; i < ntg; i++) {
					if (tg[i]) {
						memset(tg[i], 0xff, tgmem[i].n); // NaN: Metal does not clear it
					}
				}
				if (!run_group()) {
					snprintf(err, errlen, "%s: threadgroup (%u, %u, %u): %s", cur_kernel->name, x, y, z, error);
					return -1;
				}
			}
		}
	}
	dispatches++;
	return 0;
}
