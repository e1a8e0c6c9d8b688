package greedyhead

// rows16Go is the kernels' arithmetic in Go, for every platform without
// them and as their reference: for activation row i of k, approx[i·os +
// j] = float32(S − corr[i]) · (scale[j]·t[i]), S the sum over the row of
// (quant+128)·activation quant, and lanes[i·16 + j%16] the largest
// approximation of each lane.
func rows16Go(packed []byte, scale []float32, blocks, n int, x []int8, k int, corr []int32, t []float32, approx []float32, os int, lanes []float32) {
	for b := range blocks {
		blk := packed[b*group*n : (b+1)*group*n]
		for i := range k {
			xi := x[i*n : (i+1)*n]
			for l := range group {
				var sum int32
				for g := 0; g < n/4; g++ {
					w := blk[g*group*4+l*4 : g*group*4+l*4+4]
					for e := range 4 {
						sum += int32(w[e]) * int32(xi[g*4+e])
					}
				}
				st := scale[b*group+l] * t[i]
				v := float32(sum-corr[i]) * st
				approx[i*os+b*group+l] = v
				if v > lanes[i*group+l] {
					lanes[i*group+l] = v
				}
			}
		}
	}
}

// interleave8 lays k ≤ 8 activation rows of n quants (x, row after row)
// out for the kernels of five to eight rows: group g's four quants of row
// i at 32g + 4i, rows past k zero.
func interleave8(dst, x []int8, k, n int) {
	for g := range n / 4 {
		d := dst[32*g : 32*g+32]
		for i := range 8 {
			if i < k {
				copy(d[4*i:4*i+4], x[i*n+4*g:])
			} else {
				clear(d[4*i : 4*i+4])
			}
		}
	}
}

// aboveGo appends to idx the i ≥ from with x[i] ≥ floor, or reports
// false once idx would hold more than limit.
func aboveGo(x []float32, from int, floor float32, idx []int32, limit int) ([]int32, bool) {
	for i := from; i < len(x); i++ {
		if x[i] >= floor {
			if len(idx) == limit {
				return nil, false
			}
			idx = append(idx, int32(i))
		}
	}
	return idx, true
}
