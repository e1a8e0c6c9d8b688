package ioreport

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
)

// replay is a Source that hands out recorded deltas in order, repeating
// the last one when they run out.
type replay struct {
	samples [][]Channel
	i       int
	closed  bool
}

func (r *replay) Delta() ([]Channel, error) {
	s := r.samples[min(r.i, len(r.samples)-1)]
	r.i++
	return s, nil
}

func (r *replay) Close() error { r.closed = true; return nil }

type recorded struct {
	Chips []struct {
		Name        string      `json:"name"`
		Samples     [][]Channel `json:"samples"`
		Domains     hw.Domain   `json:"domains"`
		WantTotalNJ []uint64    `json:"want_total_nj"`
		WantCPUNJ   []uint64    `json:"want_cpu_nj"`
	} `json:"chips"`
}

func loadFixtures(t *testing.T) recorded {
	t.Helper()
	b, err := os.ReadFile("testdata/samples.json")
	if err != nil {
		t.Fatal(err)
	}
	var r recorded
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRecordedSamples replays each chip's samples: the first builds the
// counter, and each (including the first again) is then read as a delta.
// The expected sums were worked by hand from the fixture, per channel.
func TestRecordedSamples(t *testing.T) {
	for _, chip := range loadFixtures(t).Chips {
		t.Run(chip.Name, func(t *testing.T) {
			src := &replay{samples: append([][]Channel{chip.Samples[0]}, chip.Samples...)}
			c, err := NewCounter(src)
			if err != nil {
				t.Fatal(err)
			}
			if c.Domains() != chip.Domains {
				t.Fatalf("domains %v, want %v", c.Domains(), chip.Domains)
			}
			var total, cpu uint64
			for i := range chip.Samples {
				r, err := c.Read()
				if err != nil {
					t.Fatalf("sample %d: %v", i, err)
				}
				total += chip.WantTotalNJ[i]
				cpu += chip.WantCPUNJ[i]
				if r.UJ != total/1000 || r.Live != cpu || r.Epoch != 0 {
					t.Fatalf("sample %d: reading %+v, want %d µJ total, CPU rail %d nJ", i, r, total/1000, cpu)
				}
			}
			c.Close()
			if !src.closed {
				t.Fatal("Close did not release the source")
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		gpuRollup bool
		rail      Rail
		ok        bool
	}{
		{"CPU Energy", true, RailCPU, true},
		{"DIE_1_CPU Energy", true, RailCPU, true},
		{"GPU Energy", true, RailGPU, true},
		{"GPU0", true, 0, false}, // inside the roll-up
		{"GPU0", false, RailGPU, true},
		{"GPU0_1", false, RailGPU, true},
		{"GPU", false, 0, false},
		{"GPU SRAM0", false, 0, false},
		{"ANE", true, RailANE, true},
		{"ANE0_1", true, RailANE, true},
		{"ANE0_SRAM", true, 0, false},
		{"DRAM", true, RailDRAM, true},
		{"DRAM1", true, RailDRAM, true},
		{"DRAMX", true, 0, false},
		{"ECPU", true, 0, false},
		{"PACC0_CPU3", true, 0, false},
		{"PCIe Port 0 Energy", true, 0, false},
	}
	for _, tt := range tests {
		rail, ok := Classify(tt.name, tt.gpuRollup)
		if ok != tt.ok || (ok && rail != tt.rail) {
			t.Errorf("Classify(%q, %v) = %v, %v; want %v, %v", tt.name, tt.gpuRollup, rail, ok, tt.rail, tt.ok)
		}
	}
}

func TestNanojoules(t *testing.T) {
	for unit, want := range map[string]uint64{"mJ": 1e6, "uJ": 1e3, "µJ": 1e3, "μJ": 1e3, "nJ": 1, " mJ ": 1e6} {
		if got, err := Nanojoules(unit); err != nil || got != want {
			t.Errorf("Nanojoules(%q) = %d, %v; want %d", unit, got, err, want)
		}
	}
	for _, unit := range []string{"J", "mW", "", "pJ"} {
		if _, err := Nanojoules(unit); err == nil {
			t.Errorf("Nanojoules(%q) accepted", unit)
		}
	}
}

func base() []Channel {
	return []Channel{
		{Group: Group, Name: "CPU Energy", Unit: "mJ", Value: 10},
		{Group: Group, Name: "GPU Energy", Unit: "nJ", Value: 5000},
	}
}

func TestBadSamples(t *testing.T) {
	tests := []struct {
		name string
		next []Channel
		want string
	}{
		{"negative delta", []Channel{{Group: Group, Name: "CPU Energy", Unit: "mJ", Value: -1}, {Group: Group, Name: "GPU Energy", Unit: "nJ", Value: 1}}, "backwards"},
		{"missing channel", []Channel{{Group: Group, Name: "CPU Energy", Unit: "mJ", Value: 1}}, "missing"},
		{"duplicate channel", append(base(), base()[0]), "twice"},
		{"unit changed", []Channel{{Group: Group, Name: "CPU Energy", Unit: "W", Value: 1}, {Group: Group, Name: "GPU Energy", Unit: "nJ", Value: 1}}, "unknown energy unit"},
		{"overflow", []Channel{{Group: Group, Name: "CPU Energy", Unit: "mJ", Value: 1 << 62}, {Group: Group, Name: "GPU Energy", Unit: "nJ", Value: 1}}, "overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCounter(&replay{samples: [][]Channel{base(), base(), tt.next, base()}})
			if err != nil {
				t.Fatal(err)
			}
			r0, err := c.Read()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("bad sample read: %v, want an error about %q", err, tt.want)
			}
			r2, err := c.Read()
			if err != nil {
				t.Fatal(err)
			}
			if r2.Epoch == r0.Epoch {
				t.Fatal("a lost interval kept the epoch")
			}
		})
	}
}

func TestNewCounterRefuses(t *testing.T) {
	if _, err := NewCounter(&replay{samples: [][]Channel{{{Group: Group, Name: "GPU Energy", Unit: "nJ", Value: 1}}}}); err == nil {
		t.Fatal("a group without a CPU channel was accepted")
	}
	if _, err := NewCounter(&replay{samples: [][]Channel{{{Group: Group, Name: "CPU Energy", Unit: "kWh", Value: 1}}}}); err == nil {
		t.Fatal("an unknown unit was accepted")
	}
	boom := errors.New("no subscription")
	if _, err := NewCounter(failing{boom}); !errors.Is(err, boom) {
		t.Fatalf("source error: %v", err)
	}
}

type failing struct{ err error }

func (f failing) Delta() ([]Channel, error) { return nil, f.err }
func (f failing) Close() error              { return nil }

// TestLiveness holds the IOReport counter to the mesh/1 §3.3 rule through
// the real probe: the CPU rail itself must advance in 4 of every 5
// intervals. A chip whose GPU moves but whose CPU rail is republished in
// lumps is not live.
func TestLiveness(t *testing.T) {
	stream := func(cpuEvery int) [][]Channel {
		var out [][]Channel
		for i := range 64 {
			cpu := int64(0)
			if i%cpuEvery == 0 {
				cpu = 140
			}
			out = append(out, []Channel{
				{Group: Group, Name: "CPU Energy", Unit: "mJ", Value: cpu},
				{Group: Group, Name: "GPU Energy", Unit: "nJ", Value: 500000},
			})
		}
		return out
	}
	for _, tt := range []struct {
		every int
		live  bool
	}{{1, true}, {3, false}} {
		clk := hwtest.NewClock(time.Unix(0, 0))
		c, err := NewCounter(&replay{samples: stream(tt.every)})
		if err != nil {
			t.Fatal(err)
		}
		l := hw.Probe(context.Background(), []hw.Counter{c}, hw.ProbeConfig{Clock: clk, Burn: func(context.Context) {}})[0]
		if l.Live != tt.live {
			t.Fatalf("CPU rail every %d intervals: live=%v (%s)", tt.every, l.Live, l.Reason)
		}
	}
}

func TestOpenOffDarwin(t *testing.T) {
	c, err := Open()
	if err != nil {
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Open: %v", err)
		}
		return
	}
	c.Close() // on a Mac, the real thing opened
}
