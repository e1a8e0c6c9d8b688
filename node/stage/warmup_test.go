package stage

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// TestStagesWarmUp: the head's stage and a node's stage step a position
// as they load, so that on a CPU that packs the Q8_0 weights it reads from
// memory the first request finds them packed: a node's stage before it
// answers Ready, the head's before Start returns.
func TestStagesWarmUp(t *testing.T) {
	f := fortunes(t)
	c, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if !quant.PacksStreamed(quant.Q8_0, c.Embd) && !quant.PacksStreamed(quant.Q8_0, c.FF) {
		t.Skipf("this CPU does not pack Q8_0 weights of %d or %d columns read from memory (quant.PacksStreamed)", c.Embd, c.FF)
	}
	head, node := nodeID(1), nodeID(2)
	pn := newPipeNet(t, f, node)
	nodeBE := cpu.New(cpu.Options{Threads: 1, CacheBytes: 1}) // every weight read from memory
	defer nodeBE.Close()
	pn.servers[node].Backend = nodeBE
	h := dialRaw(t, pn, head, node)
	h.send(&stagewire.LoadStage{Stage: 1, Model: fortunesDigest, Lo: 2, Hi: 4, Context: 64, Batch: 16, Seqs: 2,
		Out: stagewire.DTypeF32, Prev: head, Head: head})
	if _, ok := h.read().(*stagewire.Ready); !ok {
		t.Fatal("the stage did not load")
	}
	if nodeBE.StreamedPacked() == 0 {
		t.Error("a node's stage answered Ready with no weight packed: its first step would pack them")
	}

	headBE := cpu.New(cpu.Options{Threads: 1, CacheBytes: 1})
	defer headBE.Close()
	pn2 := newPipeNet(t, f, node)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Start(ctx, PipelineConfig{File: f, Digest: fortunesDigest, Self: head,
		Stages:  []Placement{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: node, Range: model.LayerRange{Lo: 2, Hi: 4}}},
		Context: 64, Batch: 16, Seqs: 2, Backend: headBE, Dial: pipeDialer{pn2, head}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if headBE.StreamedPacked() == 0 {
		t.Error("the head's stage started with no weight packed: its first step would pack them")
	}
}
