package model_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// BenchmarkJointProducts times the built-in model's steps of 1, 5 and 9
// rows (a decoded token; windows of four and eight drafts) at position 40,
// each row's greedy token picked, with its blocks' query, key and value
// and its gate and up multiplied as joint products (backend.Joint: the
// default) and one product a weight (Model.DropJoint), in the same run,
// alternating, each model on a CPU backend of its own. x_k is the time
// of a k-row step one product a weight over its time joint (above 1: the
// joint products are faster), v_k a joint k-row step's extra rows over a
// one-row step, each; the least of BENCH_REPS (200) rounds of each.
// MESHNODE_MODELS adds the F16 file.
func BenchmarkJointProducts(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"meshnode-fortunes-q8_0.gguf", "meshnode-fortunes-f16.gguf"} {
		path, ok := modelPath(name)
		if !ok {
			b.Logf("%s not found (the F16 file is not in the repository; set MESHNODE_MODELS)", name)
			continue
		}
		b.Run(name, func(b *testing.B) {
			rows := []int{1, 5, 9}
			type timer struct {
				best  []time.Duration
				round func()
			}
			load := func(joint bool) *timer {
				be := cpu.New(cpu.Options{Threads: envInt("BENCH_THREADS", 0)})
				b.Cleanup(func() { be.Close() })
				_, m := modeltest.Load(b, path, be)
				if !joint {
					m.DropJoint()
				}
				s, err := m.NewSession(model.SessionOptions{Context: 64})
				if err != nil {
					b.Fatal(err)
				}
				prompt := make([]uint32, 40)
				for i := range prompt {
					prompt[i] = uint32(100 + i*7%500)
				}
				if _, err := s.EvalArgMax(ctx, prompt); err != nil {
					b.Fatal(err)
				}
				bt, err := m.NewBatch(model.BatchOptions{Tokens: 9, Seqs: 9})
				if err != nil {
					b.Fatal(err)
				}
				t := &timer{best: make([]time.Duration, len(rows))}
				for i := range t.best {
					t.best[i] = math.MaxInt64
				}
				t.round = func() {
					for i, k := range rows {
						start := time.Now()
						if err := bt.Step(ctx, []model.Seq{{Session: s, Tokens: prompt[:k], Logits: k}}); err != nil {
							b.Fatal(err)
						}
						for j := range k {
							bt.ArgMaxAt(0, j)
						}
						t.best[i] = min(t.best[i], time.Since(start))
						s.Truncate(len(prompt))
					}
				}
				return t
			}
			joint, apart := load(true), load(false)
			for range envInt("BENCH_REPS", 200) {
				joint.round()
				apart.round()
			}
			for b.Loop() {
				joint.round()
			}
			for i, k := range rows {
				b.ReportMetric(float64(apart.best[i])/float64(joint.best[i]), fmt.Sprintf("x_%d", k))
				if k > 1 {
					b.ReportMetric((float64(joint.best[i])/float64(joint.best[0])-1)/float64(k-1), fmt.Sprintf("v_%d", k))
				}
			}
			b.ReportMetric(float64(joint.best[0].Microseconds()), "t1_us")
		})
	}
}
