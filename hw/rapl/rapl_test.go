package rapl

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
)

const fullRange = 262143328850 // a typical Intel max_energy_range_uj

// tree builds a fake powercap tree: each zone is "id=name" with its
// starting energy_uj, all with range rng.
func tree(rng uint64, zones ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, z := range zones {
		id, name, _ := strings.Cut(z, "=")
		dir := Dir + "/" + id + "/"
		fsys[dir+"name"] = &fstest.MapFile{Data: []byte(name + "\n")}
		fsys[dir+"max_energy_range_uj"] = &fstest.MapFile{Data: []byte(strconv.FormatUint(rng, 10) + "\n")}
		fsys[dir+"energy_uj"] = &fstest.MapFile{Data: []byte("1000\n")}
	}
	// The control-type directory has no energy and must be skipped.
	fsys[Dir+"/intel-rapl/enabled"] = &fstest.MapFile{Data: []byte("1\n")}
	return fsys
}

func set(fsys fstest.MapFS, id string, uj uint64) {
	fsys[Dir+"/"+id+"/energy_uj"].Data = []byte(strconv.FormatUint(uj, 10) + "\n")
}

func ids(zs []Zone) string {
	var s []string
	for _, z := range zs {
		s = append(s, z.ID)
	}
	return strings.Join(s, ",")
}

func TestZoneChoice(t *testing.T) {
	tests := []struct {
		name    string
		zones   []string
		want    string
		domains hw.Domain
	}{
		{"client with psys: psys alone",
			[]string{"intel-rapl:0=package-0", "intel-rapl:0:0=core", "intel-rapl:0:1=uncore", "intel-rapl:0:2=dram", "intel-rapl:1=psys", "intel-rapl-mmio:0=package-0"},
			"intel-rapl:1", hw.DomainCPU | hw.DomainDRAM},
		{"two-socket server: packages and their dram",
			[]string{"intel-rapl:0=package-0", "intel-rapl:0:0=dram", "intel-rapl:1=package-1", "intel-rapl:1:0=dram"},
			"intel-rapl:0,intel-rapl:0:0,intel-rapl:1,intel-rapl:1:0", hw.DomainCPU | hw.DomainDRAM},
		{"mmio duplicate of the msr package removed",
			[]string{"intel-rapl:0=package-0", "intel-rapl:0:0=core", "intel-rapl-mmio:0=package-0"},
			"intel-rapl:0", hw.DomainCPU},
		{"mmio alone is used",
			[]string{"intel-rapl-mmio:0=package-0"},
			"intel-rapl-mmio:0", hw.DomainCPU},
		{"amd: package without dram",
			[]string{"intel-rapl:0=package-0", "intel-rapl:0:0=core"},
			"intel-rapl:0", hw.DomainCPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Open(tree(fullRange, tt.zones...), hwtest.NewClock(time.Unix(0, 0)))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if got := ids(c.Zones()); got != tt.want || c.Domains() != tt.domains {
				t.Fatalf("zones %s domains %v, want %s %v", got, c.Domains(), tt.want, tt.domains)
			}
		})
	}
}

func TestWraparound(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	const top = fullRange
	fsys := tree(top, "intel-rapl:0=package-0", "intel-rapl:0:0=dram")
	set(fsys, "intel-rapl:0", top-100)
	set(fsys, "intel-rapl:0:0", top-990)
	c, err := Open(fsys, clk)
	if err != nil {
		t.Fatal(err)
	}
	r0, _ := c.Read()
	steps := []struct{ pkg, dram, wantPkg, wantTotal uint64 }{
		{top - 50, top - 980, 50, 60}, // plain advance
		{100, top - 970, 200, 220},    // package wrapped: 50 to the top, 100 after
		{100, top - 970, 200, 220},    // no movement
		{999, top - 1, 1099, 2088},    // dram advances to the top
		{1000, 5, 1100, 2095},         // dram wraps: 1 to the top, 5 after
	}
	for i, s := range steps {
		clk.Advance(time.Second)
		set(fsys, "intel-rapl:0", s.pkg)
		set(fsys, "intel-rapl:0:0", s.dram)
		r, err := c.Read()
		if err != nil {
			t.Fatal(err)
		}
		pkg := r.Parts[0].Live - r0.Parts[0].Live
		if pkg != s.wantPkg || r.UJ-r0.UJ != s.wantTotal || r.Epoch != r0.Epoch {
			t.Fatalf("step %d: package %d total %d epoch %d; want %d %d %d", i, pkg, r.UJ-r0.UJ, r.Epoch, s.wantPkg, s.wantTotal, r0.Epoch)
		}
	}
}

// TestZoneParts: every zone summed is a part of the reading, named
// stably, so that a frozen DRAM zone cannot hide behind an advancing
// package (issue #17 item 1).
func TestZoneParts(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	fsys := tree(fullRange, "intel-rapl:0=package-0", "intel-rapl:0:0=dram", "intel-rapl:1=package-1", "intel-rapl:1:0=dram")
	c, err := Open(fsys, clk)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range r.Parts {
		got = append(got, p.Name+"="+p.Domains.String())
	}
	if want := "rapl:package-0=cpu rapl:dram-0=dram rapl:package-1=cpu rapl:dram-1=dram"; strings.Join(got, " ") != want {
		t.Fatalf("parts %v, want %s", got, want)
	}
	if z := c.Zones(); z[1].Part != "rapl:dram-0" {
		t.Fatalf("zones %+v", z)
	}

	// Both packages advance; socket 1's DRAM does not.
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 5}, clk, nil)
	s, _ := m.OpenFor(hw.DomainCPU)
	clk.Advance(20 * time.Millisecond)
	set(fsys, "intel-rapl:0", 400_000)
	set(fsys, "intel-rapl:0:0", 50_000)
	set(fsys, "intel-rapl:1", 400_000)
	if e, _ := s.Close(); e.Provenance() != hw.Estimator {
		t.Fatalf("a span over a frozen DRAM zone: %v, want Estimator", e)
	}
	s, _ = m.OpenFor(hw.DomainCPU)
	clk.Advance(20 * time.Millisecond)
	set(fsys, "intel-rapl:0", 800_000)
	set(fsys, "intel-rapl:0:0", 100_000)
	set(fsys, "intel-rapl:1", 800_000)
	set(fsys, "intel-rapl:1:0", 100_000)
	if e, _ := s.Close(); e.Provenance() != hw.HwShunt || e.UJ() != 400_000+50_000+400_000+99_000 {
		t.Fatalf("every zone advancing: %v, want HwShunt", e)
	}
}

// TestWrapGapStartsEpoch: reads further apart than a full range at 1 kW
// could hide a wrap, so the counter refuses to bridge them.
func TestWrapGapStartsEpoch(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	c, err := Open(tree(fullRange, "intel-rapl:0=package-0"), clk)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxGap() < 4*time.Minute || c.MaxGap() > 5*time.Minute {
		t.Fatalf("MaxGap %v for a 262 kJ range at 1 kW, want about 262 s", c.MaxGap())
	}
	r0, _ := c.Read()
	clk.Advance(c.MaxGap() / 2)
	if r, _ := c.Read(); r.Epoch != r0.Epoch {
		t.Fatal("epoch changed within the safe gap")
	}
	clk.Advance(c.MaxGap() + time.Second)
	if r, _ := c.Read(); r.Epoch == r0.Epoch {
		t.Fatal("epoch kept across a gap that could hide a wrap")
	}
}

func TestMeterAcrossWrap(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	fsys := tree(fullRange, "intel-rapl:0=package-0")
	set(fsys, "intel-rapl:0", fullRange-10_000)
	c, err := Open(fsys, clk)
	if err != nil {
		t.Fatal(err)
	}
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 5}, clk, nil)
	s, _ := m.Open()
	clk.Advance(20 * time.Millisecond)
	set(fsys, "intel-rapl:0", 10_000) // 20 mJ in 20 ms across the wrap: 1 W
	e, err := s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := e.MeasuredUJ(); !ok || got != 20_000 || e.Provenance() != hw.HwShunt || e.EstimatedUJ() != 100_000 {
		t.Fatalf("got %v, want 20000 µJ measured, 100000 estimated, HwShunt", e)
	}
}

// denyFS refuses energy_uj as a non-root reader is refused.
type denyFS struct{ fstest.MapFS }

func (d denyFS) Open(name string) (fs.File, error) {
	if strings.HasSuffix(name, "/energy_uj") {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return d.MapFS.Open(name)
}

func TestErrors(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(0, 0))
	_, err := Open(denyFS{tree(fullRange, "intel-rapl:0=package-0")}, clk)
	if !errors.Is(err, ErrUnreadable) || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "CVE-2020-8694") {
		t.Fatalf("unreadable zones: %v", err)
	}
	if _, err := Open(fstest.MapFS{}, clk); !errors.Is(err, ErrNoZones) {
		t.Fatalf("no powercap dir: %v", err)
	}
	if _, err := Open(tree(fullRange, "intel-rapl:0:0=core"), clk); !errors.Is(err, ErrNoZones) {
		t.Fatalf("only a core zone: %v", err)
	}
	bad := tree(fullRange, "intel-rapl:0=package-0")
	bad[Dir+"/intel-rapl:0/max_energy_range_uj"].Data = []byte("0\n")
	if _, err := Open(bad, clk); err == nil {
		t.Fatal("a zero range was accepted")
	}
	over := tree(1000, "intel-rapl:0=package-0")
	c, err := Open(over, clk)
	if err != nil {
		t.Fatal(err)
	}
	set(over, "intel-rapl:0", 5000)
	if _, err := c.Read(); err == nil {
		t.Fatal("a reading beyond the range was accepted")
	}
}
