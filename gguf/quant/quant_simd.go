//go:build (amd64 || arm64) && !purego

package quant

// q8_0Quant quantises blocks of x into y as quantBlockQ8_0 does, up to
// the first block holding an Inf or NaN, and returns how many it did.
//
//go:noescape
func q8_0Quant(x *float32, y *byte, blocks int) (done int)

func quantizeQ8_0SIMD(x []float32, y []byte) {
	nb := len(x) / 32
	for i := 0; i < nb; {
		i += q8_0Quant(&x[32*i], &y[34*i], nb-i)
		if i < nb { // a block with Inf or NaN: the Go kernel knows what to do
			quantBlockQ8_0(x[32*i:32*i+32], y[34*i:34*i+34])
			i++
		}
	}
}

// q8KQuant quantises blocks of x into y as quantBlockQ8_K does, up to the
// first block holding an Inf or NaN, and returns how many it did.
//
//go:noescape
func q8KQuant(x *float32, y *byte, blocks int) (done int)

func quantizeQ8_KSIMD(x []float32, y []byte) {
	nb := len(x) / QK_K
	for i := 0; i < nb; {
		i += q8KQuant(&x[QK_K*i], &y[292*i], nb-i)
		if i < nb {
			quantBlockQ8_K(x[QK_K*i:QK_K*i+QK_K], y[292*i:292*i+292])
			i++
		}
	}
}
