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

// BenchmarkDurableServe: a serve over the file journal, ungranted (one
// sealed record) and granted (authorised, debited, sealed, each synced),
// against the same serve with no journal. It reports the journal's growth
// per serve, which the journal never compacts.
func BenchmarkDurableServe(b *testing.B) {
	req := genRequest(32, 4, receipt.F2, 1_000)
	prompt := promptOf(32)
	base := newSteward(b, Config{Backends: referenceBackends(), Meter: &fakeMeter{energy: hw.Estimated(1_000)}})
	const n = 100
	start := time.Now()
	for range n {
		if _, err := base.Serve(context.Background(), req, prompt, nil); err != nil {
			b.Fatal(err)
		}
	}
	plain := time.Since(start) / n
	for _, granted := range []bool{false, true} {
		b.Run(fmt.Sprintf("granted=%v", granted), func(b *testing.B) {
			f := newBenchFixture(b)
			size := f.j.Size()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				var opts []ServeOption
				if granted {
					opts = append(opts, WithPresentation(f.present(req)))
				}
				if _, err := f.s.Serve(context.Background(), req, prompt, nil, opts...); err != nil {
					b.Fatal(err)
				}
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(f.j.Size()-size)/float64(b.N), "journal-B/serve")
			b.ReportMetric(float64(per)/float64(plain), "x-unjournaled")
		})
	}
}
