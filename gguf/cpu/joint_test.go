package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestMatMuls: a joint product gives each weight's MatMul bits, on one
// thread and three, below the hand-out threshold (the calling goroutine
// alone) and above it (every product handed out), for weights of one type
// (a block's query, key and value; its gate and up), of mixed types (a
// Q4_K_M block's Q6_K value goes alone, the others together), and with a
// bias-free weight of one row; a window of 1, 5 and 9 rows.
func TestMatMuls(t *testing.T) {
	const cols = 256
	rng := rand.New(rand.NewPCG(5, 6))
	type w struct {
		typ  quant.Type
		rows int
	}
	sets := map[string][]w{
		"qkv Q8_0":        {{quant.Q8_0, 64}, {quant.Q8_0, 32}, {quant.Q8_0, 32}},
		"gate-up F16":     {{quant.F16, 96}, {quant.F16, 96}},
		"Q4_K_M qkv":      {{quant.Q4_K, 48}, {quant.Q4_K, 16}, {quant.Q6_K, 16}},
		"mixed, odd rows": {{quant.Q6_K, 37}, {quant.Q4_0, 21}, {quant.Q6_K, 5}, {quant.Q4_0, 1}},
	}
	for name, set := range sets {
		data := make([][]byte, len(set))
		for i, s := range set {
			data[i] = quantized(t, s.typ, normals(rng, s.rows*cols, 0.05))
		}
		for _, threads := range []int{1, 3} {
			for _, least := range []int{-1, 0} {
				for _, n := range []int{1, 5, 9} {
					t.Run(fmt.Sprintf("%s/threads=%d/split=%v/n=%d", name, threads, least == 0, n), func(t *testing.T) {
						if least == 0 {
							defer cpu.SetParallelProduct(cpu.SetParallelProduct(0))
						}
						be := newBackend(t, threads)
						x := tensor(be, n, cols, normals(rng, n*cols, 1))
						ws := make([]backend.Weight, len(set))
						alone, joint := make([]backend.Tensor, len(set)), make([]backend.Tensor, len(set))
						for i, s := range set {
							var err error
							if ws[i], err = be.Weight(s.typ, s.rows, cols, data[i]); err != nil {
								t.Fatal(err)
							}
							alone[i], joint[i] = tensor(be, n, s.rows, nil), tensor(be, n, s.rows, nil)
							be.MatMul(alone[i], ws[i], x)
						}
						be.MatMuls(joint, ws, x)
						for i := range set {
							if a, j := read(be, alone[i]), read(be, joint[i]); !slices.Equal(a, j) {
								t.Fatalf("weight %d (%s, %d rows): the joint product differs from MatMul's", i, set[i].typ, set[i].rows)
							}
						}
					})
				}
			}
		}
	}
}

// TestMatMulsShapes: a joint product refuses outputs and weights that do
// not match, as MatMul does.
func TestMatMulsShapes(t *testing.T) {
	be := newBackend(t, 2)
	data := quantized(t, quant.Q8_0, make([]float32, 32*64))
	w, err := be.Weight(quant.Q8_0, 32, 64, data)
	if err != nil {
		t.Fatal(err)
	}
	x := tensor(be, 2, 64, nil)
	for name, call := range map[string]func(){
		"counts": func() { be.MatMuls([]backend.Tensor{tensor(be, 2, 32, nil)}, []backend.Weight{w, w}, x) },
		"dst shape": func() {
			be.MatMuls([]backend.Tensor{tensor(be, 2, 32, nil), tensor(be, 2, 31, nil)}, []backend.Weight{w, w}, x)
		},
		"input cols": func() {
			be.MatMuls([]backend.Tensor{tensor(be, 2, 32, nil)}, []backend.Weight{w}, tensor(be, 2, 32, nil))
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			call()
		}()
	}
}
