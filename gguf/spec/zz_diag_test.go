package spec_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
)

type logJ struct {
	p   spec.Judged
	log *[]string
}

func (l logJ) Propose(ctx context.Context, seq []uint32, gen, k int) ([]spec.Draft, error) {
	return l.ProposeJudged(ctx, seq, gen, k, nil)
}
func (l logJ) ProposeJudged(ctx context.Context, seq []uint32, gen, k int, judge func(float64) (bool, bool)) ([]spec.Draft, error) {
	t := time.Now()
	d, err := l.p.ProposeJudged(ctx, seq, gen, k, judge)
	*l.log = append(*l.log, fmt.Sprintf("@%d k%d→%d %.0fms", len(seq)-gen, k, len(d), float64(time.Since(t).Microseconds())/1000))
	return d, err
}

func TestZZ1B(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	home, _ := os.UserCacheDir()
	tf, _ := gguf.Open(home + "/meshnode-bench/llama-3.2-1b-shape-q8_0.gguf")
	df, _ := gguf.Open(home + "/meshnode-bench/llama-3.2-1b-shape-q4_0.gguf")
	target, _ := model.Load(tf, be)
	draft, _ := model.Load(df, be)
	ctx := context.Background()
	prices, _ := spec.Measure(ctx, target, draft, 32, 0)
	t.Logf("prices %+v", prices)
	s, _ := target.NewSession(model.SessionOptions{Context: 512})
	ds, _ := draft.NewSession(model.SessionOptions{Context: 512})
	bt, _ := target.NewBatch(model.BatchOptions{Tokens: 16, Seqs: 16})
	p := []uint32{128000}
	for i := range 15 {
		p = append(p, uint32(1000+i*37))
	}
	for range 2 {
		var log []string
		w := prices.Window(0)
		w.Expect(spec.CopyPrior)
		w.Limit(32)
		ds.Truncate(0)
		prop := logJ{spec.NewModelProposer(ds, sample.Params{}, -1), &log}
		t0 := time.Now()
		_, st, err := spec.Generate(ctx, bt, s, p, 32, sample.Params{}, prop, w)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v %+v rounds: %s", time.Since(t0), st, strings.Join(log, " | "))
	}
	t0 := time.Now()
	spec.Generate(ctx, bt, s, p, 32, sample.Params{}, nil, nil)
	t.Logf("plain %v", time.Since(t0))
}
