// ops.metal: RMSNorm, the elementwise kernels, RoPE, the KV cache,
// attention and argmax, each the CPU backend's arithmetic (gguf/cpu).
// Positions come in each dispatch's arguments (setBytes).

// Threadgroup memory for the group reductions: 64 floats (ff_group_sum
// and group_max), a multiple of 16 bytes.
#define REDUCE_FLOATS 64

// ---- RMSNorm ----

struct NormArgs {
	int cols, group;
	float eps;
};

#define GROUP_IDS                                                                                                       \
	uint3 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]], uint3 ntg [[threads_per_threadgroup]], \
		ushort sg [[simdgroup_index_in_threadgroup]], ushort lane [[thread_index_in_simdgroup]],                          \
		ushort nsg [[simdgroups_per_threadgroup]]

// rms_norm normalises each group-element group of each row as ggml's
// rms_norm then mul: Σx² (float64 on the CPU; float-float here), scale
// 1/√(mean+eps) in float32, x·scale·w. Threadgroups (cols / group, rows)
// of 256. y may be x.
kernel void rms_norm(device const float *x [[buffer(0)]], device float *y [[buffer(1)]], device const float *w [[buffer(2)]],
		     constant NormArgs &a [[buffer(3)]], threadgroup float *part [[threadgroup(0)]], GROUP_IDS) {
	long off = long(tg.y) * a.cols + long(tg.x) * a.group;
	device const float *xs = x + off;
	device float *ys = y + off;
	ff sum = ff{0.0f, 0.0f};
	for (int e = int(tid); e < a.group; e += int(ntg.x)) {
		float v = xs[e];
		sum = ff_add1(sum, v * v);
	}
	sum = ff_group_sum(sum, part, sg, lane, nsg);
	float mean = ff_div_int(sum, float(a.group));
	float scale = 1.0f / sqrt(mean + a.eps);
	for (int e = int(tid); e < a.group; e += int(ntg.x)) {
		ys[e] = (xs[e] * scale) * w[e];
	}
}

struct AddNormArgs {
	int cols;
	float eps;
};

// add_rms_norm is add then rms_norm over whole rows: x += r, y = norm(x)·w,
// one dispatch for the residual add and the next norm. Threadgroups
// (1, rows) of 256. y may be x or r.
kernel void add_rms_norm(device float *x [[buffer(0)]], device const float *r [[buffer(1)]], device float *y [[buffer(2)]],
			 device const float *w [[buffer(3)]], constant AddNormArgs &a [[buffer(4)]], threadgroup float *part [[threadgroup(0)]],
			 GROUP_IDS) {
	long off = long(tg.y) * a.cols;
	device float *xs = x + off;
	device const float *rs = r + off;
	device float *ys = y + off;
	ff sum = ff{0.0f, 0.0f};
	for (int e = int(tid); e < a.cols; e += int(ntg.x)) {
		float v = xs[e] + rs[e];
		xs[e] = v;
		sum = ff_add1(sum, v * v);
	}
	sum = ff_group_sum(sum, part, sg, lane, nsg);
	float mean = ff_div_int(sum, float(a.cols));
	float scale = 1.0f / sqrt(mean + a.eps);
	for (int e = int(tid); e < a.cols; e += int(ntg.x)) {
		ys[e] = (xs[e] * scale) * w[e];
	}
}

// ---- Elementwise: threadgroups ⌈n / 256⌉ of 256 ----

struct ElemArgs {
	int n;
	float s;  // scale or cap
	int cols; // add_bias: the bias's length
	int kind; // glu: 0 SiLU, 1 GELU (tanh) through ggml's fp16 table
};

#define ELEM_ID uint i [[thread_position_in_grid]]

kernel void add(device float *dst [[buffer(0)]], device const float *b [[buffer(1)]], constant ElemArgs &a [[buffer(2)]], ELEM_ID) {
	if (int(i) < a.n) {
		dst[i] += b[i];
	}
}

kernel void scale(device float *x [[buffer(0)]], constant ElemArgs &a [[buffer(1)]], ELEM_ID) {
	if (int(i) < a.n) {
		x[i] *= a.s;
	}
}

kernel void softcap(device float *x [[buffer(0)]], constant ElemArgs &a [[buffer(1)]], ELEM_ID) {
	if (int(i) < a.n) {
		x[i] = a.s * mesh_tanhf(x[i] / a.s);
	}
}

kernel void add_bias(device float *x [[buffer(0)]], device const float *b [[buffer(1)]], constant ElemArgs &a [[buffer(2)]], ELEM_ID) {
	if (int(i) < a.n) {
		x[i] += b[int(i) % a.cols];
	}
}

// glu: dst = f(gate)·up. dst may be gate or up.
kernel void glu(device float *dst [[buffer(0)]], device const float *gate [[buffer(1)]], device const float *up [[buffer(2)]],
		constant ElemArgs &a [[buffer(3)]], ELEM_ID) {
	if (int(i) >= a.n) {
		return;
	}
	float x = gate[i], u = up[i];
	if (a.kind == 0) {
		dst[i] = silu(x) * u;
	} else if (x <= -10.0f) {
		dst[i] = 0;
	} else if (x >= 10.0f) {
		dst[i] = x * u;
	} else {
		dst[i] = gelu_table(x) * u;
	}
}

// ---- RoPE ----

struct RoPEArgs {
	int cols, cols2, head_dim, dims, neox, pos;
};

// rope rotates every head of row t (position pos + t) of x (tg.z 0) or x2
// (1: one dispatch does Q and K) by the backend's table of (cos, sin) per
// position and pair, which the host fills with the CPU's arithmetic. neox
// selects the (i, i + dims/2) pairing over adjacent pairs. Threadgroups
// (rows, 1, 1 or 2) of 128.
kernel void rope(device float *x [[buffer(0)]], device float *x2 [[buffer(1)]], device const float *table [[buffer(2)]],
		 constant RoPEArgs &a [[buffer(3)]], uint3 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
		 uint3 ntg [[threads_per_threadgroup]]) {
	device float *xs = tg.z == 1 ? x2 : x;
	int cols = tg.z == 1 ? a.cols2 : a.cols;
	int t = int(tg.x), half_dims = a.dims / 2, heads = cols / a.head_dim;
	device const float *cs = table + long(a.pos + t) * a.dims;
	device float *row = xs + long(t) * cols;
	for (int idx = int(tid); idx < heads * half_dims; idx += int(ntg.x)) {
		int h = idx / half_dims, k = idx % half_dims;
		float c = cs[2 * k], s = cs[2 * k + 1];
		int i0 = a.neox ? k : 2 * k, i1 = a.neox ? k + half_dims : 2 * k + 1;
		device float *xh = row + h * a.head_dim;
		float v0 = xh[i0], v1 = xh[i1];
		xh[i0] = v0 * c - v1 * s;
		xh[i1] = v0 * s + v1 * c;
	}
}

// ---- KV cache ----
//
// Per layer, keys by head then position (head h's key at position p is the
// dk elements at (h·cap + p)·dk) and values transposed (element d of head
// h at position p is at (h·dv + d)·cap + p), as the CPU keeps them, so each
// score and each output element is one contiguous dot product.

struct KVArgs {
	int kvheads, dk, dv, cap, pos;
};

// store_kv writes row t of k and v as position pos + t. Threadgroups
// (⌈max(kd, vd) / 256⌉, rows, 2: keys, values) of 256.
template <bool F16>
static inline void store_kv(device const float *k, device const float *v, device uchar *kc, device uchar *vc, constant KVArgs &a, uint3 tg,
			    uint tid) {
	int e = int(tg.x) * 256 + int(tid), t = int(tg.y);
	long p = a.pos + t;
	long idx;
	float val;
	device uchar *c;
	if (tg.z == 0) {
		int kd = a.kvheads * a.dk;
		if (e >= kd) {
			return;
		}
		idx = (long(e / a.dk) * a.cap + p) * a.dk + e % a.dk;
		val = k[long(t) * kd + e];
		c = kc;
	} else {
		int vd = a.kvheads * a.dv;
		if (e >= vd) {
			return;
		}
		idx = long(e) * a.cap + p;
		val = v[long(t) * vd + e];
		c = vc;
	}
	if (F16) {
		((device ushort *)c)[idx] = float_to_half(val);
	} else {
		((device float *)c)[idx] = val;
	}
}

#define KV_PARAMS                                                                                                                \
	device const float *k [[buffer(0)]], device const float *v [[buffer(1)]], device uchar *kc [[buffer(2)]],                  \
		device uchar *vc [[buffer(3)]], constant KVArgs &a [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]], \
		uint tid [[thread_index_in_threadgroup]]

kernel void store_kv_f16(KV_PARAMS) { store_kv<true>(k, v, kc, vc, a, tg, tid); }
kernel void store_kv_f32(KV_PARAMS) { store_kv<false>(k, v, kc, vc, a, tg, tid); }

// ---- Attention ----

#define ATT_THREADS 256
#define ATT_MAX_HEAD 256

struct AttArgs {
	int heads, kvheads, dk, dv, cap, window;
	float scale, softcap;
	int row0, pos;
};

template <bool F16>
static inline float kv_get(device const uchar *c, long idx) {
	return F16 ? half_to_float(((device const ushort *)c)[idx]) : ((device const float *)c)[idx];
}

// attend computes head tg.x of query row row0 + tg.y as the CPU does
// (llama.cpp without flash attention): the query rounded to the cache's
// type; each score a dot product with a key (SIMD group w takes keys w,
// w+8, …; lane l its elements l, l+32, …); softcap, scale, max; e^(s−max)
// with the sum in float-float (float64 on the CPU); the weights scaled by
// 1/sum and rounded to the cache's type; each output element a dot
// product of the weights with a row of transposed values. The scores live
// in device scratch, cap floats per (row, head) of the dispatch.
// Threadgroups (heads, rows of this dispatch) of 256; threadgroup memory
// 0 holds the query (ATT_MAX_HEAD floats), 1 the reductions.
template <bool F16>
static inline void attend(device const float *q, device float *out, device const uchar *kc, device const uchar *vc, device float *scores,
			  constant AttArgs &a, threadgroup float *qs, threadgroup float *part, uint3 tg, uint tid, uint3 ntg, ushort sg,
			  ushort lane, ushort nsg) {
	int h = int(tg.x), r = int(tg.y), i = a.row0 + r;
	int p = a.pos + i;
	int lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
	int n = p + 1 - lo;
	int kvh = h / (a.heads / a.kvheads);
	int dk = a.dk, dv = a.dv, cap = a.cap;
	device const float *qrow = q + (long(i) * a.heads + h) * dk;
	for (int e = int(tid); e < dk; e += int(ntg.x)) {
		qs[e] = F16 ? round_half(qrow[e]) : qrow[e];
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);

	device float *sc = scores + (long(r) * a.heads + h) * cap;
	float wmax = NEG_INF;
	long kbase = (long(kvh) * cap + lo) * dk;
	for (int k = sg; k < n; k += nsg) {
		float acc = 0;
		for (int e = lane; e < dk; e += SIMD_WIDTH) {
			acc += kv_get<F16>(kc, kbase + long(k) * dk + e) * qs[e];
		}
		float s = simd_broadcast(fold(acc, SIMD_WIDTH), 0);
		if (a.softcap > 0) {
			s = a.softcap * mesh_tanhf(s / a.softcap);
		}
		s = s * a.scale;
		if (lane == 0) {
			sc[k] = s;
		}
		wmax = go_max(wmax, s);
	}
	threadgroup_barrier(mem_flags::mem_device);
	float m = group_max(wmax, part, sg, lane, nsg);

	ff sum = ff{0.0f, 0.0f};
	for (int k = int(tid); k < n; k += int(ntg.x)) {
		float e = mesh_expf(sc[k] - m);
		sc[k] = e;
		sum = ff_add1(sum, e);
	}
	sum = ff_group_sum(sum, part, sg, lane, nsg);
	float inv = ff_recip(sum);
	for (int k = int(tid); k < n; k += int(ntg.x)) {
		float v = sc[k] * inv;
		sc[k] = F16 ? round_half(v) : v;
	}
	threadgroup_barrier(mem_flags::mem_device);

	device float *o = out + (long(i) * a.heads + h) * dv;
	for (int d = sg; d < dv; d += nsg) {
		long vbase = (long(kvh) * dv + d) * cap + lo;
		float acc = 0;
		for (int j = lane; j < n; j += SIMD_WIDTH) {
			acc += kv_get<F16>(vc, vbase + j) * sc[j];
		}
		acc = fold(acc, SIMD_WIDTH);
		if (lane == 0) {
			o[d] = acc;
		}
	}
}

#define ATT_PARAMS                                                                                                                    \
	device const float *q [[buffer(0)]], device float *out [[buffer(1)]], device const uchar *kc [[buffer(2)]],                     \
		device const uchar *vc [[buffer(3)]], device float *scores [[buffer(4)]], constant AttArgs &a [[buffer(5)]],            \
		threadgroup float *qs [[threadgroup(0)]], threadgroup float *part [[threadgroup(1)]], GROUP_IDS
#define ATT_ARGS q, out, kc, vc, scores, a, qs, part, tg, tid, ntg, sg, lane, nsg

kernel void attend_f16(ATT_PARAMS) { attend<true>(ATT_ARGS); }
kernel void attend_f32(ATT_PARAMS) { attend<false>(ATT_ARGS); }

// ---- Argmax ----

struct ArgMaxArgs {
	int n;
};

// argmax_simd leaves every lane with the group's best (value, index): the
// larger value, the lower index between equals (NaN never wins).
static inline void argmax_simd(thread float &best, thread int &at) {
	for (ushort m = 16; m > 0; m >>= 1) {
		float ov = simd_shuffle_xor(best, m);
		int oi = simd_shuffle_xor(at, m);
		if (ov > best || (ov == best && oi < at)) {
			best = ov;
			at = oi;
		}
	}
}

// argmax writes the index of x's largest element, the lowest on a tie, 0
// when none is above -Inf (NaN never wins): the sampler's greedy choice.
// One threadgroup of up to 1024; threadgroup memory 64 words.
kernel void argmax(device const float *x [[buffer(0)]], device int *out [[buffer(1)]], constant ArgMaxArgs &a [[buffer(2)]],
		   threadgroup float *part [[threadgroup(0)]], GROUP_IDS) {
	float best = NEG_INF;
	int at = 0;
	for (int i = int(tid); i < a.n; i += int(ntg.x)) {
		if (x[i] > best) {
			best = x[i];
			at = i;
		}
	}
	argmax_simd(best, at);
	threadgroup int *bi = (threadgroup int *)(part + 32);
	if (lane == 0) {
		part[sg] = best;
		bi[sg] = at;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (sg == 0) {
		best = lane < nsg ? part[lane] : NEG_INF;
		at = lane < nsg ? bi[lane] : 0;
		argmax_simd(best, at);
		if (lane == 0) {
			*out = at;
		}
	}
}

// ---- LFM2's gated short convolution ----

// CONV_MAX_KERNEL bounds the convolution's taps (backend.MaxConvKernel).
#define CONV_MAX_KERNEL 64

struct ConvArgs {
	int row0, n0, row1, n1, ch, k;
};

// gated_conv runs one sequence's rows (the spans row0+n0 then row1+n1)
// through LFM2's gated convolution: y (n × ch) = c ⊙ conv(b ⊙ x), b, c
// and x the three chunks of bcx's rows (n × 3·ch), conv the causal
// convolution with w (ch × k, a channel's taps oldest first) over the
// sequence's previous k−1 products (prev) without an activation, each
// tap an fma rounded once (the CPU's detmath.FMA32); its last k−1
// products go to next, which may be prev. A thread per channel, its
// window in registers; threadgroups (⌈ch/256⌉) of 256.
kernel void gated_conv(device float *y [[buffer(0)]], device const float *bcx [[buffer(1)]], device const float *w [[buffer(2)]],
		       device const float *prev [[buffer(3)]], device float *next [[buffer(4)]], constant ConvArgs &a [[buffer(5)]], ELEM_ID) {
	int c = int(i);
	if (c >= a.ch) {
		return;
	}
	int ch = a.ch, k = a.k;
	device const float *wt = w + long(c) * k;
	float win[CONV_MAX_KERNEL];
	for (int r = 0; r < k - 1; r++) {
		win[r] = prev[long(r) * ch + c];
	}
	for (int sp = 0; sp < 2; sp++) {
		int row = sp == 0 ? a.row0 : a.row1, n = sp == 0 ? a.n0 : a.n1;
		for (int r = row; r < row + n; r++) {
			device const float *in = bcx + long(r) * 3 * ch;
			win[k - 1] = in[c] * in[2 * ch + c];
			float sum = 0;
			for (int t = 0; t < k; t++) {
				sum = fma(win[t], wt[t], sum);
			}
			y[long(r) * ch + c] = in[ch + c] * sum;
			for (int t = 0; t < k - 1; t++) {
				win[t] = win[t + 1];
			}
		}
	}
	for (int r = 0; r < k - 1; r++) {
		next[long(r) * ch + c] = win[r];
	}
}
