package ina3221

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
)

// syncFS lets a test change attribute values while a sampler reads them.
type syncFS struct {
	mu sync.Mutex
	m  fstest.MapFS
}

func (f *syncFS) Open(name string) (fs.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	file, ok := f.m[name]
	if !ok {
		return f.m.Open(name) // directories and errors
	}
	// Hand out a snapshot so the reader never sees a later write.
	snap := fstest.MapFS{"f": &fstest.MapFile{Data: append([]byte(nil), file.Data...)}}
	return snap.Open("f")
}

func (f *syncFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m.ReadDir(name)
}

func (f *syncFS) set(name string, v int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[name] = &fstest.MapFile{Data: []byte(strconv.FormatInt(v, 10) + "\n")}
}

const (
	nanoHwmon = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3/"
	orinA     = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1/"
	orinB     = "sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon2/"
	jp4       = "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0/"
)

func attr(v string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(v + "\n")} }

// orinNano is a JetPack 5/6 Orin Nano: one monitor, VDD_IN on channel 1.
func orinNano() fstest.MapFS {
	return fstest.MapFS{
		nanoHwmon + "name":            attr("ina3221"),
		nanoHwmon + "update_interval": attr("35"),
		nanoHwmon + "in1_label":       attr("VDD_IN"),
		nanoHwmon + "in1_input":       attr("5000"),
		nanoHwmon + "curr1_input":     attr("1000"),
		nanoHwmon + "in2_label":       attr("VDD_CPU_GPU_CV"),
		nanoHwmon + "in2_input":       attr("5000"),
		nanoHwmon + "curr2_input":     attr("400"),
		nanoHwmon + "in3_label":       attr("VDD_SOC"),
		nanoHwmon + "in3_input":       attr("5000"),
		nanoHwmon + "curr3_input":     attr("300"),
	}
}

// agxOrin has no input rail: two monitors, two unconnected channels.
func agxOrin() fstest.MapFS {
	return fstest.MapFS{
		orinA + "in1_label": attr("VDD_GPU_SOC"), orinA + "in1_input": attr("5000"), orinA + "curr1_input": attr("1000"),
		orinA + "in2_label": attr("VDD_CPU_CV"), orinA + "in2_input": attr("5000"), orinA + "curr2_input": attr("800"),
		orinA + "in3_label": attr("VIN_SYS_5V0"), orinA + "in3_input": attr("5000"), orinA + "curr3_input": attr("600"),
		orinB + "in1_label": attr("NC"), orinB + "in1_input": attr("0"), orinB + "curr1_input": attr("0"),
		orinB + "in2_label": attr("VDDQ_VDD2_1V8AO"), orinB + "in2_input": attr("5000"), orinB + "curr2_input": attr("200"),
		orinB + "in3_label": attr("NC"), orinB + "in3_input": attr("0"), orinB + "curr3_input": attr("0"),
	}
}

// nanoJP4 is a JetPack 4 Jetson Nano: the iio layout.
func nanoJP4() fstest.MapFS {
	return fstest.MapFS{
		jp4 + "rail_name_0": attr("POM_5V_IN"), jp4 + "in_voltage0_input": attr("5000"), jp4 + "in_current0_input": attr("1200"), jp4 + "in_power0_input": attr("6000"),
		jp4 + "rail_name_1": attr("POM_5V_GPU"), jp4 + "in_voltage1_input": attr("5000"), jp4 + "in_current1_input": attr("100"), jp4 + "in_power1_input": attr("500"),
		jp4 + "rail_name_2": attr("POM_5V_CPU"), jp4 + "in_voltage2_input": attr("5000"), jp4 + "in_current2_input": attr("300"), jp4 + "in_power2_input": attr("1500"),
	}
}

func labels(rs []Rail) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Layout+":"+r.Label)
	}
	return strings.Join(s, ",")
}

func TestDiscovery(t *testing.T) {
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		rails   string
		domains hw.Domain
		window  time.Duration
	}{
		{"orin nano (hwmon): VDD_IN alone", orinNano(), "hwmon:VDD_IN", hw.DomainModule, 100 * time.Millisecond},
		{"agx orin (hwmon): connected rails summed", agxOrin(),
			"hwmon:VDDQ_VDD2_1V8AO,hwmon:VDD_CPU_CV,hwmon:VDD_GPU_SOC,hwmon:VIN_SYS_5V0", hw.DomainCPU | hw.DomainGPU | hw.DomainDRAM, 100 * time.Millisecond},
		{"nano (jetpack 4 iio): POM_5V_IN alone", nanoJP4(), "iio:POM_5V_IN", hw.DomainModule, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.fsys, Options{Clock: hwtest.NewClock(time.Unix(0, 0))})
			if err != nil {
				t.Fatal(err)
			}
			if got := labels(s.Rails()); got != tt.rails || s.Domains() != tt.domains || s.MinWindow() != tt.window {
				t.Fatalf("rails %s domains %v window %v; want %s %v %v", got, s.Domains(), s.MinWindow(), tt.rails, tt.domains, tt.window)
			}
		})
	}
}

func TestSlowSensorWidensWindow(t *testing.T) {
	fsys := orinNano()
	fsys[nanoHwmon+"update_interval"] = attr("140")
	s, err := Open(fsys, Options{Clock: hwtest.NewClock(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if s.MinWindow() != 280*time.Millisecond {
		t.Fatalf("window %v under a 140 ms sensor, want 280ms", s.MinWindow())
	}
}

func TestOpenErrors(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	if _, err := Open(fstest.MapFS{}, Options{Clock: clk}); !errors.Is(err, ErrNoRails) {
		t.Fatalf("no monitors: %v", err)
	}
	onlyNC := fstest.MapFS{orinB + "in1_label": attr("NC"), orinB + "in1_input": attr("0"), orinB + "curr1_input": attr("0")}
	if _, err := Open(onlyNC, Options{Clock: clk}); !errors.Is(err, ErrNoRails) {
		t.Fatalf("only NC channels: %v", err)
	}
	broken := orinNano()
	delete(broken, nanoHwmon+"curr1_input")
	if _, err := Open(broken, Options{Clock: clk}); err == nil {
		t.Fatal("a rail without a current attribute was accepted")
	}
	wild := orinNano()
	wild[nanoHwmon+"in1_input"] = attr("9999999999")
	if _, err := Open(wild, Options{Clock: clk}); err == nil || !strings.Contains(err.Error(), "implausible") {
		t.Fatalf("an implausible voltage: %v", err)
	}
	if _, err := Open(orinNano(), Options{Clock: clk, Period: time.Minute}); err == nil {
		t.Fatal("a one-minute period was accepted")
	}
}

// TestTrapezoid drives samples by hand and checks the integral against the
// trapezoid rule worked by hand.
func TestTrapezoid(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	f := &syncFS{m: orinNano()}
	s, err := Open(f, Options{Clock: clk}) // first sample: 5 V × 1 A = 5 W
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		dt     time.Duration
		mA     int64
		wantUJ uint64
	}{
		{10 * time.Millisecond, 1400, 60_000},  // (5 W + 7 W)/2 × 10 ms
		{10 * time.Millisecond, 1400, 130_000}, // 7 W × 10 ms
		{5 * time.Millisecond, 0, 147_500},     // (7 W + 0)/2 × 5 ms
		{3 * time.Nanosecond, 1, 147_500},      // (0 + 5 mW)/2 × 3 ns = 7.5 pJ: carried, not lost
	}
	for i, st := range steps {
		clk.Advance(st.dt)
		f.set(nanoHwmon+"curr1_input", st.mA)
		if err := s.sample(); err != nil {
			t.Fatal(err)
		}
		r, err := s.Read()
		if err != nil {
			t.Fatal(err)
		}
		if r.UJ != st.wantUJ {
			t.Fatalf("step %d: %d µJ, want %d", i, r.UJ, st.wantUJ)
		}
	}
	if s.rem != 15_000 { // 7.5 pJ in half-femtojoules
		t.Fatalf("remainder %d half-fJ, want 15000", s.rem)
	}
}

func TestGapsAndStaleness(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	s, err := Open(orinNano(), Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	r0, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(s.staleAfter() + time.Millisecond)
	if _, err := s.Read(); !errors.Is(err, ErrStale) {
		t.Fatalf("read of an old sample: %v", err)
	}
	clk.Advance(s.maxGap())
	if err := s.sample(); err != nil {
		t.Fatal(err)
	}
	r1, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	if r1.Epoch == r0.Epoch || r1.UJ != r0.UJ {
		t.Fatalf("after a gap: %+v from %+v; want a new epoch and nothing integrated across it", r1, r0)
	}
}

func TestFreshness(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	f := &syncFS{m: orinNano()}
	s, err := Open(f, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	r0, _ := s.Read()
	for range 5 { // a stuck sensor: same values every time
		clk.Advance(10 * time.Millisecond)
		s.sample()
	}
	r1, _ := s.Read()
	if r1.Live != r0.Live || r1.UJ <= r0.UJ {
		t.Fatalf("stuck sensor: live %d→%d energy %d→%d; want live still, energy growing", r0.Live, r1.Live, r0.UJ, r1.UJ)
	}
	clk.Advance(10 * time.Millisecond)
	f.set(nanoHwmon+"curr1_input", 1001)
	s.sample()
	if r2, _ := s.Read(); r2.Live != r1.Live+1 {
		t.Fatalf("a changed reading did not count as fresh: %d→%d", r1.Live, r2.Live)
	}
}

// caughtUp waits until the sampler has sampled at the clock's time:
// Advance returns once a tick is received, not once it is handled.
func caughtUp(s *Sampler, clk *hwtest.Clock) {
	for {
		s.mu.Lock()
		caught := s.lastT.Equal(clk.Now())
		s.mu.Unlock()
		if caught {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestServe runs the sampler on the fake ticker, through a probe and a
// metered span.
func TestServe(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	f := &syncFS{m: agxOrin()} // 5 V × (1.0 + 0.8 + 0.6 + 0.2) A = 13 W
	s, err := Open(f, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	for clk.Tickers() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Serve(ctx); err == nil {
		t.Fatal("a second concurrent Serve was allowed")
	}

	// A noisy sensor: the VDD_CPU_CV current wobbles each sample.
	m := hw.NewCounterMeter(s, hw.PowerModel{Watts: 1}, clk, nil)
	span, _ := m.Open()
	for i := range 20 {
		f.set(orinA+"curr2_input", 800+int64(i%2))
		clk.Advance(10 * time.Millisecond)
		caughtUp(s, clk)
	}
	e, err := span.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := e.MeasuredUJ()
	// 200 ms at 13 W is 2.6 J; the wobble adds 2.5 mW on average.
	if !ok || e.Provenance() != hw.HwShunt || got != 2_600_475 {
		t.Fatalf("span: %v, want about 2600000 µJ HwShunt", e)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
