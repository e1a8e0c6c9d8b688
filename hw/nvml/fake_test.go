package nvml

import "unsafe"

// fakeGPU is one device of a fake NVML.
type fakeGPU struct {
	name     string
	arch     uint32
	total    uint64
	reserved uint64
	energyMJ uint64
	energy   Return // non-Success: the energy query fails (a Jetson)
}

// fake is an in-memory NVML behind a [Lib] table.
type fake struct {
	gpus     []*fakeGPU
	inits    int
	shutdown int
	initErr  Return
	noV2     bool
}

// handle makes a non-zero Device for index i.
func handle(i int) Device { return Device(0x1000 + i) }

func (f *fake) gpu(d Device) *fakeGPU {
	i := int(d) - 0x1000
	if i < 0 || i >= len(f.gpus) {
		return nil
	}
	return f.gpus[i]
}

func (f *fake) lib() *Lib {
	l := &Lib{
		Init: func() Return {
			if f.initErr != Success {
				return f.initErr
			}
			f.inits++
			return Success
		},
		Shutdown: func() Return { f.shutdown++; return Success },
		DeviceGetCount: func(n *uint32) Return {
			*n = uint32(len(f.gpus))
			return Success
		},
		DeviceGetHandleByIndex: func(i uint32, d *Device) Return {
			if int(i) >= len(f.gpus) {
				return ErrInvalidArgument
			}
			*d = handle(int(i))
			return Success
		},
		DeviceGetName: func(d Device, name *byte, n uint32) Return {
			g := f.gpu(d)
			if g == nil {
				return ErrInvalidArgument
			}
			if uint32(len(g.name)) >= n {
				return ErrInsufficientSize
			}
			buf := unsafe.Slice(name, n)
			copy(buf, g.name)
			buf[len(g.name)] = 0
			return Success
		},
		DeviceGetMemoryInfo: func(d Device, m *Memory) Return {
			g := f.gpu(d)
			if g == nil {
				return ErrInvalidArgument
			}
			*m = Memory{Total: g.total, Free: g.total - g.reserved, Used: g.reserved}
			return Success
		},
		DeviceGetTotalEnergyConsumption: func(d Device, mj *uint64) Return {
			g := f.gpu(d)
			if g == nil {
				return ErrInvalidArgument
			}
			if g.energy != Success {
				return g.energy
			}
			*mj = g.energyMJ
			return Success
		},
		DeviceGetArchitecture: func(d Device, a *uint32) Return {
			g := f.gpu(d)
			if g == nil {
				return ErrInvalidArgument
			}
			*a = g.arch
			return Success
		},
	}
	if !f.noV2 {
		l.DeviceGetMemoryInfoV2 = func(d Device, m *MemoryV2) Return {
			g := f.gpu(d)
			if g == nil || m.Version != MemoryV2Version {
				return ErrInvalidArgument
			}
			m.Total, m.Reserved, m.Free, m.Used = g.total, g.reserved, g.total-g.reserved, 0
			return Success
		}
	}
	return l
}
