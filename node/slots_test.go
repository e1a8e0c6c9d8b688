package node

import (
	"context"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/api"
)

// TestSlotsServed: a node's GET /slots has a slot for each sequence the
// model batches, at the context GET /props reports, speculative where
// the model has a draft; and a serve reports each token's text to
// api.Progress as it decodes it (what a busy slot's n_decoded counts),
// within the bound it tells api.BoundedPrepared (its n_remain): the
// request's max_tokens, or the default within the context.
func TestSlotsServed(t *testing.T) {
	cfg := Config{StateDir: t.TempDir(), Model: []ModelConfig{{Path: fortunesPath(t), Draft: DraftLookup, DraftPrices: DraftPricesFiles}}}
	n, _ := startNode(t, cfg)
	var props struct {
		TotalSlots int `json:"total_slots"`
		Settings   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	getJSON(t, n, "/props", &props)
	var slots []struct {
		ID           int   `json:"id"`
		IDTask       int64 `json:"id_task"`
		NCtx         int   `json:"n_ctx"`
		Speculative  bool  `json:"speculative"`
		IsProcessing bool  `json:"is_processing"`
	}
	getJSON(t, n, "/slots", &slots)
	if len(slots) != props.TotalSlots || props.Settings.NCtx == 0 {
		t.Fatalf("%d slots, /props says %d at n_ctx %d", len(slots), props.TotalSlots, props.Settings.NCtx)
	}
	for i, sl := range slots {
		if sl.ID != i || sl.IDTask != -1 || sl.IsProcessing || sl.NCtx != props.Settings.NCtx || !sl.Speculative {
			t.Fatalf("idle slot %d: %+v, want id %d, no task, n_ctx %d, speculative", i, sl, i, props.Settings.NCtx)
		}
	}

	m, ok := (&registry{n: n}).Local(fortunesModel)
	if !ok {
		t.Fatal("the model is not served")
	}
	const prompt = "A man walks into a bar"
	for _, c := range []struct {
		maxTokens int
		want      func(promptTokens int) int
	}{
		{20, func(int) int { return 20 }},
		{0, func(p int) int { return min(n.cfg.API.MaxTokens, props.Settings.NCtx-p) }},
	} {
		ctx := context.Background()
		p, err := m.Prepare(ctx, &api.Generation{Model: fortunesModel, Prompt: prompt, MaxTokens: c.maxTokens})
		if err != nil {
			t.Fatal(err)
		}
		bp, ok := p.(api.BoundedPrepared)
		if !ok {
			t.Fatal("a prepared serve does not say its bound")
		}
		if got, want := bp.MaxTokens(), c.want(p.PromptTokens()); got != want {
			t.Errorf("max_tokens %d: bound %d, want %d", c.maxTokens, got, want)
		}
		var counted int
		var seen, emitted strings.Builder
		res, err := p.Generate(api.WithProgress(ctx, func(text string) { counted++; seen.WriteString(text) }), func(d api.Delta) error {
			emitted.WriteString(d.Text)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if counted != res.CompletionTokens || counted == 0 || seen.String() != emitted.String() {
			t.Errorf("max_tokens %d: progress counted %d tokens (%q), the serve %d (%q)", c.maxTokens, counted, seen.String(), res.CompletionTokens, emitted.String())
		}
	}
}
