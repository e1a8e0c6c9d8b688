package ggufengine

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestHybridServesMatchAlone: models whose blocks keep a recurrent state
// (lfm2's convolutions, lfm2moe's with experts, qwen35's delta nets)
// serve a mix batched with chunked prompts, and then a second turn that
// takes up a session the first turn left (its state rewound where the
// pool trims it), each emitting exactly what it emits alone on a fresh
// engine of one slot.
func TestHybridServesMatchAlone(t *testing.T) {
	for _, arch := range []string{"lfm2", "lfm2moe", "qwen35"} {
		t.Run(arch, func(t *testing.T) {
			path, err := writeFixture(t.TempDir(), arch, "Q8_0") // 2048 tokens
			if err != nil {
				t.Fatal(err)
			}
			load := func(sessions, chunk int) *Model {
				m, err := Load(path, Config{Context: 256, Sessions: sessions, PrefillChunk: chunk})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			batched, alone := load(4, 5), load(1, 0)

			mix := randomMix(rand.New(rand.NewPCG(23, 2)), 8)
			got := make([][]uint32, len(mix))
			var wg sync.WaitGroup
			for i, r := range mix {
				wg.Go(func() {
					if _, err := batched.Engine().Serve(context.Background(), r.req, r.prompt, func(tok uint32) error {
						got[i] = append(got[i], tok)
						return nil
					}); err != nil {
						t.Errorf("serve %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			for i, r := range mix {
				if want, _ := serve(t, alone.Engine(), r.req, r.prompt); !slices.Equal(got[i], want) {
					t.Errorf("serve %d (%d prompt tokens): batched %v, alone %v", i, len(r.prompt), got[i], want)
				}
			}
			if st := batched.Engine().SchedStats(); st.MaxSeqs < 2 {
				t.Errorf("the serves were not batched together: %+v", st)
			}

			// Conversations that take up a session: a second turn (the
			// first turn's prompt, its answer and more), whose session
			// holds all but the answer's last token; a turn that leaves
			// the answer at its last evaluated token, whose state goes
			// back to the checkpoint before the last step; and a turn
			// that leaves the prompt early, whose state must be rebuilt
			// from the start.
			prompt := slices.MaxFunc(mix, func(a, b mixRequest) int { return len(a.prompt) - len(b.prompt) }).prompt
			answer, _ := serve(t, batched.Engine(), request(10, nil), prompt)
			for i, turn := range [][]uint32{
				slices.Concat(prompt, answer, []uint32{500, 600, 700}),
				slices.Concat(prompt, answer[:len(answer)-2], []uint32{1000}),
				slices.Concat(prompt[:len(prompt)/2], []uint32{800, 900}),
			} {
				if i > 0 {
					serve(t, batched.Engine(), request(10, nil), prompt) // the session as the first turn left it
				}
				s, err := batched.eng.pool.acquire(context.Background(), turn)
				if err != nil {
					t.Fatal(err)
				}
				shared := s.CommonPrefix(turn)
				batched.eng.pool.release(s)
				if shared < len(prompt)/2 {
					t.Fatalf("the pool picked a session sharing %d tokens of a turn that shares %d with the last serve", shared, len(prompt)/2)
				}
				again, _ := serve(t, batched.Engine(), request(8, nil), turn)
				fresh, _ := serve(t, load(1, 0).Engine(), request(8, nil), turn)
				if !slices.Equal(again, fresh) {
					t.Errorf("a turn of %d tokens on a session sharing %d: %v, fresh %v", len(turn), shared, again, fresh)
				}
			}
		})
	}
}
