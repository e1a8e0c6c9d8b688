// Package nvmltest provides an in-memory NVML behind an [nvml.Lib] table,
// for testing code that reads GPUs without a GPU.
package nvmltest

import (
	"unsafe"

	"github.com/meshnode/meshnode/hw/nvml"
)

// GPU is one device of a fake NVML. Tests may change its fields between
// calls (EnergyMJ to advance the counter).
type GPU struct {
	Name     string
	Arch     uint32
	Total    uint64
	Reserved uint64
	EnergyMJ uint64
	// Energy, when set, is called for the energy instead of EnergyMJ.
	Energy func() uint64
	// EnergyErr, when not nvml.Success, fails energy queries (as on a Jetson).
	EnergyErr nvml.Return
}

// NVML is an in-memory NVML.
type NVML struct {
	GPUs []*GPU
	// InitErr, when not nvml.Success, fails nvmlInit_v2.
	InitErr nvml.Return
	// NoV2 leaves out nvmlDeviceGetMemoryInfo_v2, as old drivers do.
	NoV2 bool
	// Inits and Shutdowns count the calls.
	Inits, Shutdowns int
}

// handle makes a non-zero Device for index i.
func handle(i int) nvml.Device { return nvml.Device(0x1000 + i) }

func (f *NVML) gpu(d nvml.Device) *GPU {
	i := int(d) - 0x1000
	if i < 0 || i >= len(f.GPUs) {
		return nil
	}
	return f.GPUs[i]
}

// Lib returns the function table over f.
func (f *NVML) Lib() *nvml.Lib {
	l := &nvml.Lib{
		Init: func() nvml.Return {
			if f.InitErr != nvml.Success {
				return f.InitErr
			}
			f.Inits++
			return nvml.Success
		},
		Shutdown: func() nvml.Return { f.Shutdowns++; return nvml.Success },
		DeviceGetCount: func(n *uint32) nvml.Return {
			*n = uint32(len(f.GPUs))
			return nvml.Success
		},
		DeviceGetHandleByIndex: func(i uint32, d *nvml.Device) nvml.Return {
			if int(i) >= len(f.GPUs) {
				return nvml.ErrInvalidArgument
			}
			*d = handle(int(i))
			return nvml.Success
		},
		DeviceGetName: func(d nvml.Device, name *byte, n uint32) nvml.Return {
			g := f.gpu(d)
			if g == nil {
				return nvml.ErrInvalidArgument
			}
			if uint32(len(g.Name)) >= n {
				return nvml.ErrInsufficientSize
			}
			buf := unsafe.Slice(name, n)
			copy(buf, g.Name)
			buf[len(g.Name)] = 0
			return nvml.Success
		},
		DeviceGetMemoryInfo: func(d nvml.Device, m *nvml.Memory) nvml.Return {
			g := f.gpu(d)
			if g == nil {
				return nvml.ErrInvalidArgument
			}
			*m = nvml.Memory{Total: g.Total, Free: g.Total - g.Reserved, Used: g.Reserved}
			return nvml.Success
		},
		DeviceGetTotalEnergyConsumption: func(d nvml.Device, mj *uint64) nvml.Return {
			g := f.gpu(d)
			if g == nil {
				return nvml.ErrInvalidArgument
			}
			if g.EnergyErr != nvml.Success {
				return g.EnergyErr
			}
			*mj = g.EnergyMJ
			if g.Energy != nil {
				*mj = g.Energy()
			}
			return nvml.Success
		},
		DeviceGetArchitecture: func(d nvml.Device, a *uint32) nvml.Return {
			g := f.gpu(d)
			if g == nil {
				return nvml.ErrInvalidArgument
			}
			*a = g.Arch
			return nvml.Success
		},
	}
	if !f.NoV2 {
		l.DeviceGetMemoryInfoV2 = func(d nvml.Device, m *nvml.MemoryV2) nvml.Return {
			g := f.gpu(d)
			if g == nil || m.Version != nvml.MemoryV2Version {
				return nvml.ErrInvalidArgument
			}
			m.Total, m.Reserved, m.Free, m.Used = g.Total, g.Reserved, g.Total-g.Reserved, 0
			return nvml.Success
		}
	}
	return l
}
