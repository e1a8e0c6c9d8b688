package receipt

import (
	"crypto/ed25519"
	"testing"
	"time"
)

// reportPerReceipt reports µs per receipt and receipts per second, and the
// ratio to a reference operation timed in the same run.
func reportPerReceipt(b *testing.B, ref time.Duration, refName string) {
	b.Helper()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "µs/receipt")
	b.ReportMetric(1/per.Seconds(), "receipts/s")
	if ref > 0 {
		b.ReportMetric(float64(per)/float64(ref), "x-"+refName)
	}
}

// timeRef times f over enough iterations to be stable and returns the
// time per call.
func timeRef(f func()) time.Duration {
	const n = 2000
	start := time.Now()
	for range n {
		f()
	}
	return time.Since(start) / n
}

// BenchmarkSeal: encode the core and sign it into an envelope, against a
// bare Ed25519 signature over the same core.
func BenchmarkSeal(b *testing.B) {
	s := testSealer(b, 1)
	r := generation(b, s)
	core, _ := r.Core()
	key := testKey(1)
	ref := timeRef(func() { ed25519.Sign(key, core) })
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Seal(r); err != nil {
			b.Fatal(err)
		}
	}
	reportPerReceipt(b, ref, "ed25519-sign")
}

// BenchmarkOpen: verify an envelope and decode its core, against a bare
// Ed25519 verification.
func BenchmarkOpen(b *testing.B) {
	s := testSealer(b, 1)
	sealed, err := s.Seal(generation(b, s))
	if err != nil {
		b.Fatal(err)
	}
	pub := s.Public()
	ref := timeRef(func() { ed25519.Verify(pub, sealed.Core, sealed.Envelope[len(sealed.Envelope)-64:]) })
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Open(sealed.Envelope, pub); err != nil {
			b.Fatal(err)
		}
	}
	reportPerReceipt(b, ref, "ed25519-verify")
}

// BenchmarkChainAppend: what a steward does per receipt once the serve is
// metered: stamp the chain position, seal, check the link and advance.
func BenchmarkChainAppend(b *testing.B) {
	s := testSealer(b, 1)
	r := generation(b, s)
	core, _ := r.Core()
	key := testKey(1)
	ref := timeRef(func() { ed25519.Sign(key, core) })
	var h Head
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.Stamp(&r)
		sealed, err := s.Seal(r)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Check(sealed); err != nil {
			b.Fatal(err)
		}
		h = h.Advance(sealed)
	}
	reportPerReceipt(b, ref, "ed25519-sign")
}

// BenchmarkVerifyLog: walking a log, per receipt.
func BenchmarkVerifyLog(b *testing.B) {
	s := testSealer(b, 1)
	envs, _ := buildLog(b, s, Head{}, 64)
	pub := s.Public()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := VerifyLog(envs, Head{}, pub); err != nil {
			b.Fatal(err)
		}
	}
	per := b.Elapsed() / time.Duration(b.N*len(envs))
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "µs/receipt")
	b.ReportMetric(1/per.Seconds(), "receipts/s")
}
