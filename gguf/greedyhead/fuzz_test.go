package greedyhead

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// FuzzArgMaxMatchesFullHead: on any finite F32 head of 1 to 40 rows of 8
// or 16 and any finite activation — ties, zeros, subnormals, huge values
// — a token the shadow settles is the full head's. Seeded with heads
// built the way the tests build them (a tie, an ulp apart).
func FuzzArgMaxMatchesFullHead(f *testing.F) {
	seed := func(rows, n int, w, x []float32) {
		b := []byte{byte(rows), byte(n / 8)}
		for _, v := range append(append([]float32(nil), x...), w...) {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		f.Add(b)
	}
	w := make([]float32, 3*8)
	for i := range w {
		w[i] = float32(i%5) - 2
	}
	copy(w[16:], w[8:16])
	seed(3, 8, w, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	w[17] = math.Nextafter32(w[17], 10)
	seed(3, 8, w, []float32{1, -2, 3, 0, 0, 1e-40, 7, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		rows, n := 1+int(b[0])%40, 8*(1+int(b[1])%2)
		b = b[2:]
		vals := make([]float32, n+rows*n)
		for i := range vals {
			if len(b) >= 4 {
				vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(b))
				b = b[4:]
			}
			if math.IsNaN(float64(vals[i])) || math.IsInf(float64(vals[i]), 0) {
				vals[i] = 0
			}
		}
		x, wf := vals[:n], vals[n:]
		w := encode(t, quant.F32, wf)
		h, err := New(quant.F32, w, rows, n)
		if err != nil {
			t.Fatal(err)
		}
		a := activation(t, quant.F32, x)
		dst := []int{0}
		var s Scratch
		h.ArgMax([]*quant.Activation{a}, dst, &s)
		if want := fullArgMax(quant.F32, w, rows, a); dst[0] >= 0 && dst[0] != want {
			t.Fatalf("%d rows of %d: argmax %d, the full head's %d", rows, n, dst[0], want)
		}
	})
}
