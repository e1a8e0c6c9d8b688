package model

import (
	"context"
	"fmt"
)

// WarmUp steps one position through the model (a stage of it too) on a
// throwaway session and batch, as llama.cpp's load does, so that what a
// backend does at a weight's first product is paid by the load, not by
// the first request: the CPU packs the Q8_0 weights it reads from memory
// (a 1B model's 1.2 GB, 0.5–1 s on two cores) and gives its one-row
// kernels' timing the untimed first touch it skips. A whole model or a
// first stage steps token 0, which every vocabulary has; a later stage, a
// hidden row of zeros (its norms keep it zeros).
func (m *Model) WarmUp(ctx context.Context) error {
	s, err := m.NewSession(SessionOptions{Context: 1, Batch: 1})
	if err != nil {
		return fmt.Errorf("model: warm-up: %w", err)
	}
	defer s.Close()
	b, err := m.NewBatch(BatchOptions{Tokens: 1, Seqs: 1})
	if err != nil {
		return fmt.Errorf("model: warm-up: %w", err)
	}
	seqs := []Seq{{Session: s, Logits: 1}}
	if m.First() {
		seqs[0].Tokens = []uint32{0}
		err = b.Step(ctx, seqs)
	} else {
		seqs[0].Count = 1
		err = b.StepHidden(ctx, seqs, make([]float32, m.cfg.Embd))
	}
	if err != nil {
		return fmt.Errorf("model: warm-up: %w", err)
	}
	return nil
}
