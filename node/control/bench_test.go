package control_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
)

// BenchmarkGetConfig times a get_config round trip over loopback QUIC
// (stream, handshake with its signature check, request, response) against
// the transport's floor, an echo of a frame of the same size on a stream
// of the same connection kind, and reports the ratio.
func BenchmarkGetConfig(b *testing.B) {
	n := controltest.Start(b, controltest.Options{})
	c := n.Owned(b)
	ctx := context.Background()
	snap, err := c.GetConfig(ctx)
	if err != nil {
		b.Fatal(err)
	}
	frame, _ := wire.AppendFrame(nil, snap)

	echo := controltest.MeshNode(b, controltest.Key(b, 40))
	echo.HandleControl(func(ctx context.Context, conn *quic.Conn, _ identity.EndpointID) {
		for {
			st, err := conn.AcceptStream(ctx)
			if err != nil {
				return
			}
			go func() {
				io.Copy(st, st)
				st.Close()
			}()
		}
	})
	raw := rawDial(b, controltest.Key(b, controltest.SeedClient), echo)
	roundTrip := func() {
		st, err := raw.OpenStreamSync(ctx)
		if err != nil {
			b.Fatal(err)
		}
		st.Write(frame)
		st.Close()
		if _, err := io.ReadAll(st); err != nil {
			b.Fatal(err)
		}
	}

	for range 50 { // warm both connections up
		roundTrip()
		if _, err := c.GetConfig(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.GetConfig(ctx); err != nil {
			b.Fatal(err)
		}
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.StopTimer()
	start := time.Now()
	for range b.N {
		roundTrip()
	}
	floor := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(floor.Microseconds()), "echo-µs/op")
	b.ReportMetric(float64(per)/float64(floor), "x-echo")
}
