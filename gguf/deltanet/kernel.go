package deltanet

// The state's row kernels. A row of the state (S floats, value component
// j) is visited twice per token: decayRow scales it and dots it with k,
// updateRow adds k·delta and dots it with q. The dots keep 32 lanes
// (element i's product, rounded, into lane i mod 32: the lanes of
// ggml_vec_dot_f32's SIMD sums) and fold them by halving, so the assembly
// versions (kernel_amd64.s, kernel_arm64.s), which do the leading whole
// chunks of 32, give the same bits as this Go, which does the rest.

// useKernels selects the assembly kernels where this machine has them;
// tests switch it off to hold them to the Go.
var useKernels = haveKernels

// decayRow sets row = old·decay (old may be row) and returns row·k.
func decayRow(row, old, k []float32, decay float32) float32 {
	row, old = row[:len(k)], old[:len(k)]
	var acc [32]float32
	from := 0
	if useKernels && len(k) >= 32 {
		from = len(k) &^ 31
		decayRow32(&acc, &row[0], &old[0], &k[0], decay, from/32)
	}
	for i := from; i < len(k); i++ {
		r := old[i] * decay
		row[i] = r
		acc[i&31] += float32(r * k[i])
	}
	return reduce(&acc)
}

// updateRow sets row += k·d and returns row·q.
func updateRow(row, k, q []float32, d float32) float32 {
	row, q = row[:len(k)], q[:len(k)]
	var acc [32]float32
	from := 0
	if useKernels && len(k) >= 32 {
		from = len(k) &^ 31
		updateRow32(&acc, &row[0], &k[0], &q[0], d, from/32)
	}
	for i := from; i < len(k); i++ {
		r := row[i] + float32(k[i]*d)
		row[i] = r
		acc[i&31] += float32(r * q[i])
	}
	return reduce(&acc)
}

// reduce folds the lanes by halving: lane l += lane l+w for w = 16, 8, 4,
// 2, 1; the result is lane 0.
func reduce(a *[32]float32) float32 {
	for w := 16; w > 0; w /= 2 {
		for l := range w {
			a[l] += a[l+w]
		}
	}
	return a[0]
}
