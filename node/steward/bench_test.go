package steward

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// BenchmarkServe: a whole serve (route, meter, reference engine, checks,
// commitment, seal, chain) against the same engine call alone, so the
// ratio is the steward's overhead per serve.
func BenchmarkServe(b *testing.B) {
	for _, tokens := range []uint32{1, 16} {
		b.Run(fmt.Sprintf("tokens=%d", tokens), func(b *testing.B) {
			s := newSteward(b, Config{Backends: referenceBackends(), Meter: &fakeMeter{energy: hw.Estimated(1_000)}})
			req := genRequest(32, tokens, receipt.F2, 1_000_000)
			prompt := promptOf(32)
			ref := engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F3})
			const n = 200
			start := time.Now()
			for range n {
				if _, err := ref.Serve(context.Background(), req, prompt, func(uint32) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
			engineOnly := time.Since(start) / n
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Serve(context.Background(), req, prompt, nil); err != nil {
					b.Fatal(err)
				}
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(per.Nanoseconds())/1e3, "µs/serve")
			b.ReportMetric(1/per.Seconds(), "receipts/s")
			b.ReportMetric(float64(per)/float64(engineOnly), "x-engine")
		})
	}
}
