package hw

// Facts describes the machine for gossip (PeerAnnouncement.hardware). It
// is plain data: the mesh converts it to its wire form. Zero means unknown
// wherever a figure is not queryable and no table entry covers the chip.
type Facts struct {
	Hostname string `json:"hostname"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	// Model is the board or machine: the device-tree model on a Jetson
	// ("NVIDIA Jetson AGX Orin Developer Kit"), hw.model on a Mac.
	Model string `json:"model,omitempty"`
	// CPU is the processor's brand ("Apple M2 Pro", "AMD EPYC 9654").
	CPU  string `json:"cpu,omitempty"`
	CPUs int    `json:"cpus"`
	// IsSoC is true where CPU and GPU share one chip and one memory
	// (Apple Silicon, Jetson).
	IsSoC  bool   `json:"is_soc"`
	Memory Memory `json:"memory"`
	GPUs   []GPU  `json:"gpus,omitempty"`
}

// Memory is the system memory.
type Memory struct {
	TotalBytes     uint64 `json:"total_bytes"`
	AvailableBytes uint64 `json:"available_bytes"`
	// BandwidthGBps is the copy bandwidth the node measured at start
	// (package hw/membw: one core, buffers past the caches), in GB/s; 0
	// when not measured (a node that serves no stages does not).
	BandwidthGBps float64 `json:"bandwidth_gbps,omitempty"`
}

// GPU is one GPU and what it can do.
type GPU struct {
	Name string `json:"name"`
	Arch string `json:"arch,omitempty"`
	// VRAMBytes is the memory the GPU can use: its own (NVML) or, for
	// Unified memory, the system's.
	VRAMBytes uint64 `json:"vram_bytes"`
	// ReservedBytes is memory the driver holds back from VRAMBytes.
	ReservedBytes uint64 `json:"reserved_bytes"`
	// Unified is true when VRAMBytes is system memory shared with the CPU.
	Unified bool `json:"unified"`
	// WorkingSetBytes is the most buffer memory the GPU's driver
	// recommends one process uses (Metal's
	// recommendedMaxWorkingSetSize); 0 where unknown. On a Mac,
	// ReservedBytes is VRAMBytes less it, so gossip, which has no field
	// of its own for it, carries it too.
	WorkingSetBytes uint64 `json:"working_set_bytes,omitempty"`
	// Hints from a table by chip: nominal peak memory bandwidth, FP32
	// throughput, and dense FP16 matrix throughput (tensor cores where the
	// chip has them, no sparsity). For planning, not for billing.
	MemBandwidthGBps float64 `json:"mem_bandwidth_gbps"`
	TFLOPSFP32       float64 `json:"tflops_fp32"`
	TFLOPSFP16       float64 `json:"tflops_fp16"`
}
