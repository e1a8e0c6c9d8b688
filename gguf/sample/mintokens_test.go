package sample

import "testing"

// TestMinTokens: the end tokens are held back while the history is
// shorter than MinTokens — a greedy pick takes the next likeliest, a
// sampled one never draws them, Dist leaves them out, a mask is kept
// beside it — and are picked again from then on; where the mask allows
// only an end token (a grammar that must end), it is picked.
func TestMinTokens(t *testing.T) {
	logits := []float32{0.5, 3, 1, 2.5, -1} // 1 and 3 end a generation
	eog := []uint32{1, 3}
	greedy := New(Params{MinTokens: 2, EOG: eog})
	if got := greedy.Sample(logits, nil); got != 2 {
		t.Errorf("greedy, no history: %d, want 2 (the likeliest that does not end)", got)
	}
	if got := greedy.Sample(logits, []uint32{7}); got != 2 {
		t.Errorf("greedy, one token: %d, want 2", got)
	}
	if got := greedy.Sample(logits, []uint32{7, 7}); got != 1 {
		t.Errorf("greedy, two tokens: %d, want 1 (the end, no longer held)", got)
	}
	if (Params{MinTokens: 2, EOG: eog}).ArgMax() {
		t.Error("ArgMax with min_tokens: the device's argmax would pick an end token")
	}
	sampled := New(Params{Temperature: 1, Seed: 1, MinTokens: 5, EOG: eog, TopP: 0.99})
	for range 200 {
		if got := sampled.Sample(logits, []uint32{0}); got == 1 || got == 3 {
			t.Fatalf("sampled with one token of five: drew end token %d", got)
		}
	}
	for _, x := range sampled.Dist(nil, logits, nil) {
		if x.ID == 1 || x.ID == 3 {
			t.Fatalf("Dist holds end token %d: %+v", x.ID, sampled.Dist(nil, logits, nil))
		}
	}
	mask := []uint64{0b11011} // 2 masked
	if got := greedy.SampleAllowed(logits, nil, mask); got != 0 {
		t.Errorf("masked and held: %d, want 0", got)
	}
	if got := greedy.SampleAllowed(logits, nil, []uint64{0b01000}); got != 3 {
		t.Errorf("only an end token allowed: %d, want 3", got)
	}
	for _, p := range []Params{{MinTokens: -1, EOG: eog}, {MinTokens: 2}, {Temperature: 1, TopK: 5, Order: "ki", MinTokens: 2, EOG: eog}} {
		if p.Validate() == nil {
			t.Errorf("%+v: valid", p)
		}
	}
}
