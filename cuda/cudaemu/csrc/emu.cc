// emu.cc: a CPU stand-in for libcuda.so.1, for testing the CUDA backend
// without a GPU.
//
// It implements the driver functions the backend resolves (cuda/driver)
// over host memory, and runs kernels by executing the very CUDA C sources
// of cuda/kernels, compiled here as host C++ (MESH_EMU): each block's
// threads run as fibers on the calling thread, switching at
// __syncthreads and at every warp shuffle, so barriers and shuffles have
// their GPU meaning. Device pointers are host addresses. Everything is
// synchronous except stream capture, which records launches and copies
// into a graph (copying kernel parameters by value, as the driver does)
// and runs them only when the graph is launched.
//
// It checks what a GPU would fault on or refuse: every copy's device range
// must lie in an allocation; device allocations end at a guard page, so a
// kernel reading past one crashes the test instead of reading garbage;
// launches outside CUDA's grid and block limits fail; a kernel must be a
// PTX .entry of the loaded module with the parameter count its host
// signature has; barriers that cannot all be reached, and shuffles across
// lanes that have exited, fail the launch.

#define MESH_EMU 1
#include "../../kernels/kernels.cu"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

typedef int CUresult;
enum {
	OK = 0,
	E_INVALID_VALUE = 1,
	E_OUT_OF_MEMORY = 2,
	E_NOT_INITIALIZED = 3,
	E_NO_DEVICE = 100,
	E_INVALID_DEVICE = 101,
	E_INVALID_IMAGE = 200,
	E_INVALID_CONTEXT = 201,
	E_INVALID_HANDLE = 400,
	E_NOT_FOUND = 500,
	E_ALREADY_REGISTERED = 712,
	E_NOT_REGISTERED = 713,
	E_LAUNCH_FAILED = 719,
	E_NOT_SUPPORTED = 801,
	E_CAPTURE_UNSUPPORTED = 900,
};

// ---- Fibers ----

extern "C" {
dim3s emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
void emu_switch(void **save, void *to);
}

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

enum State { READY, AT_BARRIER, AT_SHUFFLE, DONE };

const size_t kStack = 64 << 10;

struct Fiber {
	void *sp;
	char *stack;
	dim3s tid;
	int lane, warp;
	State state;
	u32 gen;
};

std::vector<Fiber> fibers;
int current;
void *sched_sp;
void (*cur_entry)(void **);
void **cur_params;
u32 exchange[2][32][32]; // [generation parity][warp][lane]
const char *launch_error;

void fiber_main() {
	cur_entry(cur_params);
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

} // namespace

extern "C" void emu_syncthreads(void) { yield(AT_BARRIER); }

// emu_shfl publishes v for the warp, waits for every lane to do the same,
// and reads the source lane's value (mode 0: lane ^ arg, 1: lane + arg or
// its own past the warp's end, 2: lane arg). Alternate generations use
// alternate slots, so a fast lane's next shuffle cannot overwrite a value
// a slower lane has yet to read.
extern "C" u32 emu_shfl(u32 v, int mode, int arg) {
	Fiber &f = fibers[current];
	int par = f.gen & 1;
	f.gen++;
	exchange[par][f.warp][f.lane] = v;
	yield(AT_SHUFFLE);
	int src = mode == 0 ? f.lane ^ arg : mode == 1 ? (f.lane + arg < 32 ? f.lane + arg : f.lane) : (arg & 31);
	return exchange[par][f.warp][src];
}

namespace {

// run_block runs every thread of one block to completion. It returns false
// (with launch_error set) when the threads cannot all proceed.
bool run_block(int nthreads) {
	for (int t = 0; t < nthreads; t++) {
		Fiber &f = fibers[t];
		f.tid = dim3s{(u32)t % emu_blockDim.x, (u32)t / emu_blockDim.x % emu_blockDim.y, (u32)t / (emu_blockDim.x * emu_blockDim.y)};
		f.lane = t % 32;
		f.warp = t / 32;
		f.state = READY;
		f.gen = 0;
		fiber_init(f);
	}
	int live = nthreads, nwarps = (nthreads + 31) / 32;
	for (;;) {
		for (int t = 0; t < nthreads; t++) {
			if (fibers[t].state != READY) {
				continue;
			}
			current = t;
			emu_threadIdx = fibers[t].tid;
			emu_switch(&sched_sp, fibers[t].sp);
			if (fibers[t].state == DONE) {
				live--;
			}
		}
		if (live == 0) {
			return true;
		}
		bool released = false;
		for (int w = 0; w < nwarps; w++) {
			int alive = 0, waiting = 0, size = 0;
			for (int t = w * 32; t < nthreads && t < w * 32 + 32; t++) {
				size++;
				if (fibers[t].state != DONE) {
					alive++;
				}
				if (fibers[t].state == AT_SHUFFLE) {
					waiting++;
				}
			}
			if (waiting > 0 && waiting == alive) {
				if (alive != size) {
					launch_error = "warp shuffle with exited lanes";
					return false;
				}
				for (int t = w * 32; t < w * 32 + size; t++) {
					fibers[t].state = READY;
				}
				released = true;
			}
		}
		if (released) {
			continue;
		}
		int at_barrier = 0;
		for (int t = 0; t < nthreads; t++) {
			at_barrier += fibers[t].state == AT_BARRIER;
		}
		if (at_barrier == live) {
			for (int t = 0; t < nthreads; t++) {
				if (fibers[t].state == AT_BARRIER) {
					fibers[t].state = READY;
				}
			}
			continue;
		}
		launch_error = "threads wait at barriers that cannot all be reached";
		return false;
	}
}

// ---- Memory ----

struct Alloc {
	char *map;
	size_t maplen, size;
	bool host; // cuMemAllocHost
};

std::mutex mu;
std::map<uintptr_t, Alloc> allocs;               // by user address
std::map<uintptr_t, size_t> registered;          // cuMemHostRegister ranges
size_t allocated, mem_limit = (size_t)16 << 30;  // device bytes
long launches, graph_launches;
bool initialised;

size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }

// guarded places size bytes so that they end at (a 256-byte rounding
// before) a PROT_NONE page.
void *guarded(size_t size, bool host) {
	size_t pg = page(), body = (size + 255) & ~(size_t)255;
	if (body == 0) {
		body = 256;
	}
	size_t len = (body + pg - 1) / pg * pg + pg;
	char *m = (char *)mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		return nullptr;
	}
	mprotect(m + len - pg, pg, PROT_NONE);
	char *p = m + len - pg - body;
	allocs[(uintptr_t)p] = Alloc{m, len, size, host};
	return p;
}

// device_range reports whether [p, p+n) lies in one allocation or
// registered range.
bool device_range(uintptr_t p, size_t n) {
	auto it = allocs.upper_bound(p);
	if (it != allocs.begin()) {
		--it;
		if (p >= it->first && p + n <= it->first + ((it->second.size + 255) & ~(size_t)255)) {
			return true;
		}
	}
	auto rt = registered.upper_bound(p);
	if (rt != registered.begin()) {
		--rt;
		if (p >= rt->first && p + n <= rt->first + rt->second) {
			return true;
		}
	}
	return false;
}

// ---- Modules, kernels, streams, graphs ----

template <typename... A, size_t... I>
void call_with(void (*f)(A...), void **p, std::index_sequence<I...>) {
	f(*(A *)p[I]...);
}

struct KernelInfo {
	void (*run)(void **);
	int nparams;
};

template <typename... A>
constexpr std::index_sequence_for<A...> seq_of(void (*)(A...)) {
	return {};
}
template <typename... A>
constexpr int arity(void (*)(A...)) {
	return sizeof...(A);
}

#define KERNEL_ENTRY(name) {#name, KernelInfo{[](void **p) { call_with(name, p, seq_of(name)); }, arity(name)}},
#define TYPE_ENTRIES(t) KERNEL_ENTRY(mv_##t##_1) KERNEL_ENTRY(mv_##t##_2) KERNEL_ENTRY(mv_##t##_4) KERNEL_ENTRY(mv_##t##_8) KERNEL_ENTRY(embed_##t) KERNEL_ENTRY(mvx_##t)

const std::map<std::string, KernelInfo> &kernel_table() {
	static const std::map<std::string, KernelInfo> t = {
		TYPE_ENTRIES(q4_0) TYPE_ENTRIES(q4_1) TYPE_ENTRIES(q5_0) TYPE_ENTRIES(q5_1) TYPE_ENTRIES(q8_0)
		TYPE_ENTRIES(iq4_nl) TYPE_ENTRIES(q2_k) TYPE_ENTRIES(q3_k) TYPE_ENTRIES(q4_k) TYPE_ENTRIES(q5_k)
		TYPE_ENTRIES(q6_k) TYPE_ENTRIES(iq4_xs)
		TYPE_ENTRIES(f32) TYPE_ENTRIES(f16) TYPE_ENTRIES(bf16)
		KERNEL_ENTRY(quantize_q8_0) KERNEL_ENTRY(quantize_q8_1) KERNEL_ENTRY(quantize_q8_k)
		KERNEL_ENTRY(rms_norm) KERNEL_ENTRY(add_rms_norm) KERNEL_ENTRY(add) KERNEL_ENTRY(scale) KERNEL_ENTRY(softcap) KERNEL_ENTRY(add_bias)
		KERNEL_ENTRY(glu) KERNEL_ENTRY(rope) KERNEL_ENTRY(store_kv_f16) KERNEL_ENTRY(store_kv_f32)
		KERNEL_ENTRY(attend_f16) KERNEL_ENTRY(attend_f32) KERNEL_ENTRY(argmax) KERNEL_ENTRY(top_prob) KERNEL_ENTRY(rms_norm_q8_0) KERNEL_ENTRY(rms_norm_q8_1) KERNEL_ENTRY(rms_norm_q8_k) KERNEL_ENTRY(add_rms_norm_q8_0) KERNEL_ENTRY(add_rms_norm_q8_1) KERNEL_ENTRY(add_rms_norm_q8_k) KERNEL_ENTRY(glu_q8_0) KERNEL_ENTRY(glu_q8_1) KERNEL_ENTRY(glu_q8_k)
		TYPE_ENTRIES(mxfp4) KERNEL_ENTRY(glu_oai) KERNEL_ENTRY(attend_sinks_f16) KERNEL_ENTRY(attend_sinks_f32)
		KERNEL_ENTRY(short_conv) KERNEL_ENTRY(delta_scan) KERNEL_ENTRY(sigmoid_mul) KERNEL_ENTRY(gated_conv)
		KERNEL_ENTRY(moe_route) KERNEL_ENTRY(moe_bias) KERNEL_ENTRY(moe_sum)
		KERNEL_ENTRY(attend_scores_f16) KERNEL_ENTRY(attend_scores_f32) KERNEL_ENTRY(attend_softmax_f16) KERNEL_ENTRY(attend_softmax_f32)
		KERNEL_ENTRY(attend_values_f16) KERNEL_ENTRY(attend_values_f32)
	};
	return t;
}

struct Function {
	std::string name;
	KernelInfo k;
	std::vector<int> sizes; // bytes of each parameter, from the PTX
};

struct Module {
	std::map<std::string, std::vector<int>> entries; // name → parameter sizes
	std::vector<Function *> functions;
};

// A recorded operation: a launch (parameters by value) or a copy/memset.
struct Node {
	enum { LAUNCH, COPY, MEMSET } kind;
	Function *f;
	dim3s grid, block;
	std::vector<u64> args;
	void *dst;
	const void *src;
	size_t n;
	u32 value;
};

struct Graph {
	std::vector<Node> nodes;
};

struct Stream {
	Graph *capture;
};

struct Event {
	double ms;
};

double now_ms() {
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int capturing; // streams in capture: synchronous calls are refused meanwhile

CUresult run_launch(const Node &n) {
	const KernelInfo &k = n.f->k;
	std::vector<void *> params(n.args.size());
	for (size_t i = 0; i < n.args.size(); i++) {
		params[i] = (void *)&n.args[i];
	}
	emu_gridDim = n.grid;
	emu_blockDim = n.block;
	int nthreads = (int)(n.block.x * n.block.y * n.block.z);
	if ((int)fibers.size() < nthreads) {
		fibers.resize(nthreads);
	}
	cur_entry = k.run;
	cur_params = params.data();
	for (u32 z = 0; z < n.grid.z; z++) {
		for (u32 y = 0; y < n.grid.y; y++) {
			for (u32 x = 0; x < n.grid.x; x++) {
				emu_blockIdx = dim3s{x, y, z};
				if (!run_block(nthreads)) {
					return E_LAUNCH_FAILED;
				}
			}
		}
	}
	launches++;
	return OK;
}

CUresult run_node(const Node &n) {
	switch (n.kind) {
	case Node::LAUNCH:
		return run_launch(n);
	case Node::COPY:
		memmove(n.dst, n.src, n.n);
		return OK;
	case Node::MEMSET:
		for (size_t i = 0; i < n.n; i++) {
			((u32 *)n.dst)[i] = n.value;
		}
		return OK;
	}
	return E_INVALID_VALUE;
}

// submit runs n now, or records it when its stream is capturing.
CUresult submit(Stream *s, Node n) {
	if (s && s->capture) {
		s->capture->nodes.push_back(std::move(n));
		return OK;
	}
	return run_node(n);
}

// parse_entries reads each `.entry name(` and its `.param .<type>` list
// from a PTX text.
bool parse_entries(const char *ptx, Module *m) {
	const char *p = ptx;
	while ((p = strstr(p, ".entry ")) != nullptr) {
		p += 7;
		const char *open = strchr(p, '(');
		if (!open) {
			return false;
		}
		std::string name(p, open - p);
		while (!name.empty() && name.back() == ' ') {
			name.pop_back();
		}
		const char *close = strchr(open, ')');
		if (!close) {
			return false;
		}
		std::vector<int> sizes;
		for (const char *q = open; (q = strstr(q, ".param ")) != nullptr && q < close; q += 7) {
			const char *t = q + 7;
			if (!strncmp(t, ".u64", 4) || !strncmp(t, ".b64", 4) || !strncmp(t, ".s64", 4)) {
				sizes.push_back(8);
			} else {
				sizes.push_back(4);
			}
		}
		m->entries[name] = sizes;
		p = close;
	}
	return !m->entries.empty();
}

const char *error_names[][3] = {
	{"0", "CUDA_SUCCESS", "no error"},
	{"1", "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{"2", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{"3", "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{"100", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{"101", "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{"200", "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{"201", "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{"400", "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{"500", "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{"712", "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
	{"713", "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
	{"719", "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{"801", "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{"900", "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
};

// The device the stand-in reports (emu_configure changes it).
int cfg_devices = 1, cfg_major = 8, cfg_minor = 0, cfg_integrated = 0, cfg_graphs = 1;

} // namespace

// ---- The driver API ----

#define EXPORT extern "C" __attribute__((visibility("default")))
#define LOCK std::lock_guard<std::mutex> lock(mu)
#define NEED_INIT                          \
	if (!initialised) {                \
		return E_NOT_INITIALIZED;  \
	}
#define NOT_CAPTURING                         \
	if (capturing) {                      \
		return E_CAPTURE_UNSUPPORTED; \
	}

EXPORT CUresult cuInit(unsigned flags) {
	LOCK;
	if (flags != 0) {
		return E_INVALID_VALUE;
	}
	initialised = true;
	return OK;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
	*v = 12040;
	return OK;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
	for (auto &e : error_names) {
		if (atoi(e[0]) == r) {
			*s = e[1];
			return OK;
		}
	}
	return E_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
	for (auto &e : error_names) {
		if (atoi(e[0]) == r) {
			*s = e[2];
			return OK;
		}
	}
	return E_INVALID_VALUE;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
	LOCK;
	NEED_INIT;
	*n = cfg_devices;
	return OK;
}

EXPORT CUresult cuDeviceGet(int *d, int ordinal) {
	LOCK;
	NEED_INIT;
	if (ordinal < 0 || ordinal >= cfg_devices) {
		return E_INVALID_DEVICE;
	}
	*d = ordinal;
	return OK;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int d) {
	snprintf(name, len, "MeshEmu CPU stand-in %d", d);
	return OK;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
	(void)d;
	switch (attr) {
	case 1: *v = 1024; break;                                       // max threads per block
	case 13: *v = 1000000; break;                                   // clock kHz
	case 16: *v = 4; break;                                         // SMs
	case 18: *v = cfg_integrated; break;         // integrated
	case 19: *v = 1; break;                                         // can map host memory
	case 36: *v = 1000000; break;                                   // memory clock kHz
	case 37: *v = 64; break;                                        // bus width
	case 38: *v = 4 << 20; break;                                   // L2
	case 75: *v = cfg_major; break;           // compute capability
	case 76: *v = cfg_minor; break;
	case 99: *v = 1; break;                                         // host register
	default: return E_INVALID_VALUE;
	}
	return OK;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *n, int d) {
	(void)d;
	*n = mem_limit;
	return OK;
}

static int ctx_refs;

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int d) {
	LOCK;
	NEED_INIT;
	ctx_refs++;
	*ctx = (void *)(uintptr_t)(0x1000 + d);
	return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d) {
	LOCK;
	(void)d;
	if (ctx_refs == 0) {
		return E_INVALID_CONTEXT;
	}
	ctx_refs--;
	return OK;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx) {
	LOCK;
	return ctx == nullptr || ctx_refs > 0 ? OK : E_INVALID_CONTEXT;
}

EXPORT CUresult cuCtxSynchronize() { return OK; }

EXPORT CUresult cuModuleLoadData(Module **m, const void *image) {
	LOCK;
	NEED_INIT;
	Module *mod = new Module();
	if (!parse_entries((const char *)image, mod)) {
		delete mod;
		return E_INVALID_IMAGE;
	}
	*m = mod;
	return OK;
}

EXPORT CUresult cuModuleLoadDataEx(Module **m, const void *image, unsigned n, const int *options, void **values) {
	CUresult r = cuModuleLoadData(m, image);
	char *log = nullptr;
	size_t size = 0;
	for (unsigned i = 0; i < n; i++) {
		if (options[i] == 5) {
			log = (char *)values[i];
		} else if (options[i] == 6) {
			size = (size_t)values[i];
		}
	}
	if (log && size > 0) {
		snprintf(log, size, "%s", r == OK ? "" : "emu: the image has no .entry: not PTX");
	}
	return r;
}

EXPORT CUresult cuModuleUnload(Module *m) {
	LOCK;
	for (Function *f : m->functions) {
		delete f;
	}
	delete m;
	return OK;
}

EXPORT CUresult cuModuleGetFunction(Function **f, Module *m, const char *name) {
	LOCK;
	auto e = m->entries.find(name);
	auto k = kernel_table().find(name);
	if (e == m->entries.end() || k == kernel_table().end()) {
		return E_NOT_FOUND;
	}
	if ((int)e->second.size() != k->second.nparams) {
		return E_INVALID_IMAGE; // the PTX and the sources disagree
	}
	Function *fn = new Function{name, k->second, e->second};
	m->functions.push_back(fn);
	*f = fn;
	return OK;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
	LOCK;
	*total = mem_limit;
	*free = mem_limit - allocated;
	return OK;
}

EXPORT CUresult cuMemAlloc_v2(u64 *p, size_t n) {
	LOCK;
	NEED_INIT;
	NOT_CAPTURING;
	if (n == 0) {
		return E_INVALID_VALUE;
	}
	if (allocated + n > mem_limit) {
		return E_OUT_OF_MEMORY;
	}
	void *m = guarded(n, false);
	if (!m) {
		return E_OUT_OF_MEMORY;
	}
	allocated += n;
	*p = (u64)(uintptr_t)m;
	return OK;
}

static CUresult free_alloc(uintptr_t p, bool host) {
	auto it = allocs.find(p);
	if (it == allocs.end() || it->second.host != host) {
		return E_INVALID_VALUE;
	}
	if (!host) {
		allocated -= it->second.size;
	}
	munmap(it->second.map, it->second.maplen);
	allocs.erase(it);
	return OK;
}

EXPORT CUresult cuMemFree_v2(u64 p) {
	LOCK;
	NOT_CAPTURING;
	return free_alloc((uintptr_t)p, false);
}

EXPORT CUresult cuMemAllocHost_v2(void **p, size_t n) {
	LOCK;
	NEED_INIT;
	void *m = guarded(n, true);
	if (!m) {
		return E_OUT_OF_MEMORY;
	}
	*p = m;
	return OK;
}

EXPORT CUresult cuMemFreeHost(void *p) {
	LOCK;
	return free_alloc((uintptr_t)p, true);
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
	LOCK;
	(void)flags;
	if (n == 0 || (uintptr_t)p % page() != 0) {
		return E_INVALID_VALUE;
	}
	for (auto &r : registered) {
		if ((uintptr_t)p < r.first + r.second && r.first < (uintptr_t)p + n) {
			return E_ALREADY_REGISTERED;
		}
	}
	registered[(uintptr_t)p] = n;
	return OK;
}

EXPORT CUresult cuMemHostUnregister(void *p) {
	LOCK;
	return registered.erase((uintptr_t)p) ? OK : E_NOT_REGISTERED;
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(u64 *d, void *p, unsigned flags) {
	LOCK;
	if (flags != 0) {
		return E_INVALID_VALUE;
	}
	auto rt = registered.upper_bound((uintptr_t)p);
	if (rt == registered.begin()) {
		return E_INVALID_VALUE;
	}
	--rt;
	if ((uintptr_t)p >= rt->first + rt->second) {
		return E_INVALID_VALUE;
	}
	*d = (u64)(uintptr_t)p;
	return OK;
}

static CUresult copy(Stream *s, void *dst, const void *src, size_t n, bool dst_dev, bool src_dev) {
	if ((dst_dev && !device_range((uintptr_t)dst, n)) || (src_dev && !device_range((uintptr_t)src, n))) {
		return E_INVALID_VALUE;
	}
	Node node{};
	node.kind = Node::COPY;
	node.dst = dst;
	node.src = src;
	node.n = n;
	return submit(s, node);
}

EXPORT CUresult cuMemcpyHtoD_v2(u64 dst, const void *src, size_t n) {
	LOCK;
	NOT_CAPTURING;
	return copy(nullptr, (void *)(uintptr_t)dst, src, n, true, false);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, u64 src, size_t n) {
	LOCK;
	NOT_CAPTURING;
	return copy(nullptr, dst, (const void *)(uintptr_t)src, n, false, true);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(u64 dst, const void *src, size_t n, Stream *s) {
	LOCK;
	return copy(s, (void *)(uintptr_t)dst, src, n, true, false);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, u64 src, size_t n, Stream *s) {
	LOCK;
	return copy(s, dst, (const void *)(uintptr_t)src, n, false, true);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(u64 dst, u64 src, size_t n, Stream *s) {
	LOCK;
	return copy(s, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, true, true);
}

static CUresult memset32(Stream *s, u64 dst, u32 v, size_t n) {
	if (!device_range((uintptr_t)dst, n * 4)) {
		return E_INVALID_VALUE;
	}
	Node node{};
	node.kind = Node::MEMSET;
	node.dst = (void *)(uintptr_t)dst;
	node.n = n;
	node.value = v;
	return submit(s, node);
}

EXPORT CUresult cuMemsetD32_v2(u64 dst, unsigned v, size_t n) {
	LOCK;
	NOT_CAPTURING;
	return memset32(nullptr, dst, v, n);
}

EXPORT CUresult cuMemsetD32Async(u64 dst, unsigned v, size_t n, Stream *s) {
	LOCK;
	return memset32(s, dst, v, n);
}

EXPORT CUresult cuLaunchKernel(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			       unsigned shmem, Stream *s, void **params, void **extra) {
	LOCK;
	if (!f || extra || shmem != 0) {
		return E_INVALID_VALUE;
	}
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gy > 65535 || gz > 65535 || gx > 0x7fffffffu ||
	    (u64)bx * by * bz > 1024 || bz > 64) {
		return E_INVALID_VALUE;
	}
	Node node{};
	node.kind = Node::LAUNCH;
	node.f = f;
	node.grid = dim3s{gx, gy, gz};
	node.block = dim3s{bx, by, bz};
	for (size_t i = 0; i < f->sizes.size(); i++) {
		u64 v = 0;
		memcpy(&v, params[i], f->sizes[i]);
		node.args.push_back(v);
	}
	CUresult r = submit(s, std::move(node));
	if (r == E_LAUNCH_FAILED) {
		fprintf(stderr, "emu: %s: %s\n", f->name.c_str(), launch_error);
	}
	return r;
}

EXPORT CUresult cuStreamCreate(Stream **s, unsigned flags) {
	LOCK;
	(void)flags;
	*s = new Stream{nullptr};
	return OK;
}

EXPORT CUresult cuStreamDestroy_v2(Stream *s) {
	LOCK;
	if (s->capture) {
		return E_CAPTURE_UNSUPPORTED;
	}
	delete s;
	return OK;
}

EXPORT CUresult cuStreamSynchronize(Stream *s) {
	LOCK;
	return s && s->capture ? E_CAPTURE_UNSUPPORTED : OK;
}

EXPORT CUresult cuEventCreate(Event **e, unsigned flags) {
	(void)flags;
	*e = new Event{0};
	return OK;
}

EXPORT CUresult cuEventRecord(Event *e, Stream *s) {
	LOCK;
	if (s && s->capture) {
		return E_CAPTURE_UNSUPPORTED;
	}
	e->ms = now_ms();
	return OK;
}

EXPORT CUresult cuEventSynchronize(Event *e) {
	(void)e;
	return OK;
}

EXPORT CUresult cuEventElapsedTime(float *ms, Event *a, Event *b) {
	*ms = (float)(b->ms - a->ms);
	return OK;
}

EXPORT CUresult cuEventDestroy_v2(Event *e) {
	delete e;
	return OK;
}

EXPORT CUresult cuStreamBeginCapture_v2(Stream *s, int mode) {
	LOCK;
	if (!cfg_graphs) {
		return E_NOT_SUPPORTED;
	}
	if (!s || s->capture || mode < 0 || mode > 2) {
		return E_INVALID_VALUE;
	}
	s->capture = new Graph();
	capturing++;
	return OK;
}

EXPORT CUresult cuStreamEndCapture(Stream *s, Graph **g) {
	LOCK;
	if (!s || !s->capture) {
		return E_INVALID_VALUE;
	}
	*g = s->capture;
	s->capture = nullptr;
	capturing--;
	return OK;
}

EXPORT CUresult cuGraphInstantiateWithFlags(Graph **exec, Graph *g, unsigned long long flags) {
	LOCK;
	if (flags != 0) {
		return E_INVALID_VALUE;
	}
	*exec = new Graph(*g);
	return OK;
}

EXPORT CUresult cuGraphLaunch(Graph *exec, Stream *s) {
	LOCK;
	if (s && s->capture) {
		return E_CAPTURE_UNSUPPORTED;
	}
	for (const Node &n : exec->nodes) {
		CUresult r = run_node(n);
		if (r != OK) {
			return r;
		}
	}
	graph_launches++;
	return OK;
}

EXPORT CUresult cuGraphExecDestroy(Graph *g) {
	delete g;
	return OK;
}

EXPORT CUresult cuGraphDestroy(Graph *g) {
	delete g;
	return OK;
}

// ---- Test hooks (not part of the driver API) ----

// emu_live counts the device and pinned host allocations not yet freed.
EXPORT long emu_live() {
	LOCK;
	return (long)allocs.size();
}

// emu_counts reports the kernels run and the graphs launched.
EXPORT void emu_counts(long *l, long *g) {
	LOCK;
	*l = launches;
	*g = graph_launches;
}

// emu_set_memory sets the device memory cuMemAlloc gives out in all.
EXPORT void emu_set_memory(size_t n) {
	LOCK;
	mem_limit = n;
}

// emu_configure sets the device the stand-in reports: how many, their
// compute capability, whether integrated, and whether stream capture works.
EXPORT void emu_configure(int devices, int major, int minor, int integrated, int graphs) {
	LOCK;
	cfg_devices = devices;
	cfg_major = major;
	cfg_minor = minor;
	cfg_integrated = integrated;
	cfg_graphs = graphs;
}
