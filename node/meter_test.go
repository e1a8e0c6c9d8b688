package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"runtime"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/hw/meters"
	"github.com/meshnode/meshnode/hw/nvml"
	"github.com/meshnode/meshnode/hw/nvml/nvmltest"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// powercapFS is a machine root with one RAPL package zone drawing watts
// on a fake clock.
type powercapFS struct {
	fstest.MapFS
	clock *hwtest.Clock
	start time.Time
	watts float64
}

const raplZone = "sys/class/powercap/intel-rapl:0/"

func newPowercapFS(clk *hwtest.Clock, watts float64) powercapFS {
	return powercapFS{clock: clk, start: clk.Now(), watts: watts, MapFS: fstest.MapFS{
		raplZone + "name":                {Data: []byte("package-0\n")},
		raplZone + "max_energy_range_uj": {Data: []byte("262143328850\n")},
		raplZone + "energy_uj":           {},
	}}
}

func (f powercapFS) Open(name string) (fs.File, error) {
	if name == raplZone+"energy_uj" {
		uj := uint64(f.watts * f.clock.Now().Sub(f.start).Seconds() * 1e6)
		return fstest.MapFS{"f": {Data: fmt.Appendf(nil, "%d\n", uj)}}.Open("f")
	}
	return f.MapFS.Open(name)
}

// onCUDA presents a model as one whose backend runs on CUDA; its engine
// advances the meter's clock by a millisecond a token, so its spans are
// longer than RAPL's window.
type onCUDA struct {
	localModel
	clock *hwtest.Clock
	cuda  bool
}

func (m onCUDA) Backend() string {
	if m.cuda {
		return "cuda"
	}
	return m.localModel.Backend()
}

func (m onCUDA) Engine() engine.Engine {
	return clockedEngine{m.localModel.Engine(), m.clock, m.cuda}
}

type clockedEngine struct {
	engine.Engine
	clock *hwtest.Clock
	cuda  bool
}

func (e clockedEngine) Devices() hw.Domain {
	if e.cuda {
		return hw.DomainCPU | hw.DomainGPU
	}
	return engine.DevicesOf(e.Engine)
}

func (e clockedEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	return e.Engine.Serve(ctx, req, prompt, func(tok uint32) error {
		e.clock.Advance(time.Millisecond)
		return emit(tok)
	})
}

// TestServeGradedByModelDevices: through a whole node, the devices a
// model's backend runs on reach the meter. NVML does not start, so the
// meter sees no GPU and picks RAPL; a serve on the CPU is HwShunt, and a
// serve on CUDA, which RAPL does not read, is Estimator (issue #17 item
// 2). /api/status says which devices each model uses and how the meter
// grades a serve on them.
func TestServeGradedByModelDevices(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RAPL is discovered through Linux powercap")
	}
	for _, tt := range []struct {
		name    string
		cuda    bool
		grade   string
		backend string
		devices string
	}{
		{"cpu", false, "HwShunt", "cpu", "cpu"},
		{"cuda", true, "Estimator", "cuda", "cpu+gpu"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := hwtest.NewClock(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
			n, _ := startNodeWith(t, Config{Models: []string{ReferenceModel}}, func(n *Node) {
				n.meterConfig = meters.Config{Root: newPowercapFS(clk, 40), Clock: clk, Burn: func(context.Context) {},
					NVML: (&nvmltest.NVML{InitErr: nvml.ErrDriverNotLoaded}).Lib()}
				n.wrapModel = func(m localModel) localModel { return onCUDA{m, clk, tt.cuda} }
			})
			_, raw := generate(t, n, "/v1/completions", `{"model":"mesh-reference","max_tokens":20,"prompt":"hello"}`)
			var energy struct {
				Provenance string `json:"energy_provenance"`
				Receipt    struct {
					MeasuredUJ *uint64 `json:"measured_uj"`
				} `json:"receipt"`
			}
			if err := json.Unmarshal(raw, &energy); err != nil {
				t.Fatal(err)
			}
			if energy.Provenance != tt.grade || (energy.Receipt.MeasuredUJ != nil) != (tt.grade == "HwShunt") {
				t.Fatalf("usage.energy %s, want %s", raw, tt.grade)
			}

			resp, err := http.Get("http://" + n.HTTPAddr().String() + "/api/status")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var st Status
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				t.Fatal(err)
			}
			if len(st.Models) != 1 || st.Models[0].Backend != tt.backend || st.Models[0].Devices.String() != tt.devices {
				t.Fatalf("status models %+v", st.Models)
			}
			if st.Meter.Selected != meters.RAPL || len(st.Meter.Counters) == 0 || st.Meter.Counters[0].Liveness == nil ||
				len(st.Meter.Counters[0].Liveness.Parts) != 1 || st.Meter.Counters[0].Liveness.Parts[0].Name != "rapl:package-0" {
				t.Fatalf("status meter %+v", st.Meter)
			}
			var graded bool
			for _, g := range st.Meter.Serves {
				if g.Uses == st.Models[0].Devices {
					graded = g.Grade == tt.grade
				}
			}
			if !graded {
				t.Fatalf("status grades %+v, want %s for a serve on %s", st.Meter.Serves, tt.grade, tt.devices)
			}
		})
	}
}
