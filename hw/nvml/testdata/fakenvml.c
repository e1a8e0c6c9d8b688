/*
 * A stand-in for libnvidia-ml.so.1 with the entry points meshnode binds,
 * so that the purego loading path and the C ABI of every call (pointer
 * out-parameters, the nvmlMemory_v2_t layout and version check) can be
 * exercised on a machine without an NVIDIA driver. Built by
 * TestLoadRealLibrary with the system C compiler.
 */
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, INSUFFICIENT = 7 };

static int initialised;
static unsigned long long energy[2] = {1000, 5000};
static struct { char name[96]; } devs[2] = {{"Fake GPU Zero"}, {"Fake GPU One"}};

static int index_of(nvmlDevice_t d) {
	long i = (long)d - 0x100;
	return (i == 0 || i == 1) ? (int)i : -1;
}

nvmlReturn_t nvmlInit_v2(void) { initialised = 1; return OK; }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return OK; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
	if (!initialised) return UNINIT;
	*n = 2;
	return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (!initialised) return UNINIT;
	if (i > 1) return INVALID;
	*d = (nvmlDevice_t)(long)(0x100 + i);
	return OK;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
	int i = index_of(d);
	if (i < 0) return INVALID;
	if (strlen(devs[i].name) + 1 > len) return INSUFFICIENT;
	strcpy(name, devs[i].name);
	return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	int i = index_of(d);
	if (i < 0) return INVALID;
	m->total = 80ULL << 30;
	m->free = 79ULL << 30;
	m->used = 1ULL << 30;
	return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
	int i = index_of(d);
	if (i < 0) return INVALID;
	if (m->version != (unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24))) return INVALID;
	m->total = (80ULL + i) << 30;
	m->reserved = 512ULL << 20;
	m->free = 79ULL << 30;
	m->used = 0;
	return OK;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch) {
	if (index_of(d) < 0) return INVALID;
	*arch = 9; /* Hopper */
	return OK;
}

/* Each read advances the device by 100 mJ (device 1 by 300 mJ). */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
	int i = index_of(d);
	if (i < 0) return INVALID;
	energy[i] += i ? 300 : 100;
	*mj = energy[i];
	return OK;
}
