// emu_abi.h: what the stand-in's runtime (emu.cc) and the kernels'
// translation unit (the shim and the generated thunks) share.
#pragma once

extern "C" {

// emu_pos holds the running thread's position attributes.
struct emu_pos {
	unsigned tg[3];      // threadgroup_position_in_grid
	unsigned ntg[3];     // threads_per_threadgroup
	unsigned tid[3];     // thread_position_in_threadgroup
	unsigned groups[3];  // threadgroups_per_grid
	unsigned gpos[3];    // thread_position_in_grid
	unsigned ngrid[3];   // threads_per_grid
	unsigned tindex;     // thread_index_in_threadgroup
	unsigned lane, sg;   // thread_index_in_simdgroup, simdgroup_index_in_threadgroup
	unsigned nsg, width; // simdgroups_per_threadgroup, threads_per_simdgroup
};

// emu_current is the running thread's positions.
const struct emu_pos *emu_current(void);

// emu_collective publishes v for the calling lane's SIMD group, parks the
// lane until every lane of the group has called it with the same tag, and
// returns the 32 values published.
const unsigned long *emu_collective(unsigned long v, const char *tag);

// emu_threadgroup_barrier parks the thread until every thread of the
// threadgroup reaches a barrier.
void emu_threadgroup_barrier(void);

// emu_fail ends the dispatch with an error; it does not return.
void emu_fail(const char *why);

// emu_kernel is one kernel's thunk: bufs are the pointers bound at
// [[buffer(0 … 30)]], tg the threadgroup memory at [[threadgroup(0 … 7)]].
// binds lists (index, bytes) for each buffer parameter: bytes is the size
// of the structure a reference parameter reads, 0 for a pointer.
struct emu_kernel {
	const char *name;
	void (*run)(void **bufs, void **tg);
	int nbinds;
	const long *binds;
};

}
