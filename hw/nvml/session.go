package nvml

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
)

// MinWindow is NVML's minimum window: its energy counter advances in
// coarse driver updates, so spans under 100 ms are noise (mesh/1 §3.3).
const MinWindow = 100 * time.Millisecond

// ErrNoDevices means NVML initialised but found no GPU.
var ErrNoDevices = errors.New("nvml: no NVIDIA GPU found")

// GPU is what NVML says of one device.
type GPU struct {
	Index         int    `json:"index"`
	Name          string `json:"name"`
	Arch          string `json:"arch,omitempty"`
	TotalBytes    uint64 `json:"total_bytes"`
	ReservedBytes uint64 `json:"reserved_bytes"`
	FreeBytes     uint64 `json:"free_bytes"`
}

// Session is an initialised NVML with its devices enumerated.
type Session struct {
	lib  *Lib
	devs []Device

	mu     sync.Mutex
	closed bool
}

// Start initialises NVML and enumerates its devices. A machine with no GPU
// yields ErrNoDevices (and NVML is shut down again).
func Start(lib *Lib) (*Session, error) {
	if err := lib.Init().err("nvmlInit_v2"); err != nil {
		return nil, err
	}
	s := &Session{lib: lib}
	var n uint32
	if err := lib.DeviceGetCount(&n).err("nvmlDeviceGetCount_v2"); err != nil {
		lib.Shutdown()
		return nil, err
	}
	if n == 0 {
		lib.Shutdown()
		return nil, ErrNoDevices
	}
	for i := range n {
		var d Device
		if err := lib.DeviceGetHandleByIndex(i, &d).err(fmt.Sprintf("nvmlDeviceGetHandleByIndex_v2(%d)", i)); err != nil {
			lib.Shutdown()
			return nil, err
		}
		s.devs = append(s.devs, d)
	}
	return s, nil
}

// Devices is the number of GPUs.
func (s *Session) Devices() int { return len(s.devs) }

// GPUs describes every device: name, architecture and memory. Memory
// reserved by the driver is reported where the v2 call exists.
func (s *Session) GPUs() ([]GPU, error) {
	var out []GPU
	for i, d := range s.devs {
		g := GPU{Index: i}
		var name [NameBufferSize]byte
		if err := s.lib.DeviceGetName(d, &name[0], uint32(len(name))).err(fmt.Sprintf("nvmlDeviceGetName(%d)", i)); err != nil {
			return nil, err
		}
		g.Name = cString(name[:])
		if s.lib.DeviceGetArchitecture != nil {
			var a uint32
			if s.lib.DeviceGetArchitecture(d, &a) == Success {
				g.Arch = Architecture(a)
			}
		}
		m2 := MemoryV2{Version: MemoryV2Version}
		if s.lib.DeviceGetMemoryInfoV2 != nil && s.lib.DeviceGetMemoryInfoV2(d, &m2) == Success {
			g.TotalBytes, g.ReservedBytes, g.FreeBytes = m2.Total, m2.Reserved, m2.Free
		} else {
			var m Memory
			if err := s.lib.DeviceGetMemoryInfo(d, &m).err(fmt.Sprintf("nvmlDeviceGetMemoryInfo(%d)", i)); err != nil {
				return nil, err
			}
			g.TotalBytes, g.FreeBytes = m.Total, m.Free
		}
		out = append(out, g)
	}
	return out, nil
}

// Close shuts NVML down; the session's counter stops reading.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.lib.Shutdown().err("nvmlShutdown")
}

// Counter returns the [hw.Counter] over every device's energy.
func (s *Session) Counter() *Counter {
	names := make([]string, len(s.devs))
	for i := range s.devs {
		names[i] = PartName(i)
	}
	return &Counter{s: s, names: names, last: make([]uint64, len(s.devs))}
}

// PartName is the name of device i's part of the counter: "nvml:gpu0".
func PartName(i int) string { return fmt.Sprintf("nvml:gpu%d", i) }

// Counter sums the total energy of a session's GPUs. Each GPU is a part
// of its readings, judged live by itself: one GPU's counter can freeze
// while another's advances.
type Counter struct {
	s     *Session
	names []string

	mu     sync.Mutex
	last   []uint64
	primed bool
	epoch  uint64
}

// Name is "nvml".
func (c *Counter) Name() string { return "nvml" }

// Domains is the GPU.
func (c *Counter) Domains() hw.Domain { return hw.DomainGPU }

// MinWindow is [MinWindow].
func (c *Counter) MinWindow() time.Duration { return MinWindow }

// Read sums every device's energy and gives each device's energy as its
// part's liveness signal. A device whose counter went backwards (the
// driver was reloaded) starts a new epoch.
func (c *Counter) Read() (hw.Reading, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.closed {
		return hw.Reading{}, errors.New("nvml: session closed")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := make([]uint64, len(c.s.devs))
	for i, d := range c.s.devs {
		if err := c.s.lib.DeviceGetTotalEnergyConsumption(d, &cur[i]).err(fmt.Sprintf("nvmlDeviceGetTotalEnergyConsumption(device %d)", i)); err != nil {
			return hw.Reading{}, err
		}
	}
	r := hw.Reading{Parts: make([]hw.PartReading, len(cur))}
	for i, mj := range cur {
		if c.primed && mj < c.last[i] {
			c.epoch++
		}
		r.UJ += mj * 1000
		r.Parts[i] = hw.PartReading{Name: c.names[i], Domains: hw.DomainGPU, Live: mj}
	}
	copy(c.last, cur)
	c.primed = true
	r.Epoch = c.epoch
	return r, nil
}
