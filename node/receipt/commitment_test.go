package receipt

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/zeebo/blake3"
)

func le(toks []uint32) []byte {
	b := make([]byte, 4*len(toks))
	for i, t := range toks {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return b
}

// TestCommitmentFormulas checks §6.4's formulas against a direct
// concatenation, over outputs longer than the streaming buffer.
func TestCommitmentFormulas(t *testing.T) {
	prompt := make([]uint32, 3000)
	for i := range prompt {
		prompt[i] = uint32(i * 7919)
	}
	payload := PayloadDigest(prompt)
	if want := blake3.Sum256(append([]byte("mesh/1 prompt payload\x00"), le(prompt)...)); payload != ContentID(want) {
		t.Fatalf("payload %s, want %x", payload, want)
	}
	var opening Opening
	opening[5] = 9
	id := Sum([]byte("request"))
	out := prompt[:1500]
	var msg []byte
	msg = append(msg, "mesh/1 output commitment\x00"...)
	msg = append(msg, opening[:]...)
	msg = append(msg, id[:]...)
	msg = append(msg, payload[:]...)
	msg = append(msg, le(out)...)
	if got, want := Commit(opening, id, payload, out), ContentID(blake3.Sum256(msg)); got != want {
		t.Fatalf("commitment %s, want %s", got, want)
	}
}

func TestOpeningAndDisclosure(t *testing.T) {
	s, other := testSealer(t, 1), testSealer(t, 2)
	r := generation(t, s) // committed to output 7 8 9 on prompt 1 2 3
	prompt, output := []uint32{1, 2, 3}, []uint32{7, 8, 9}
	d, err := s.Disclose(&r, prompt, output)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Opens(&r) || d.Payload != PayloadDigest(prompt) {
		t.Fatalf("disclosure %+v does not open its receipt", d)
	}
	// A restarted steward (a new Sealer over the same key) derives the
	// same opening.
	again := testSealer(t, 1)
	if again.Opening(r.RequestID, r.Nonce) != d.Opening {
		t.Fatal("opening is not a function of the key, request and nonce")
	}
	// Per receipt: another nonce, request or key gives another opening.
	n2 := r.Nonce
	n2[15] = 1
	for name, o := range map[string]Opening{
		"nonce":   s.Opening(r.RequestID, n2),
		"request": s.Opening(Sum([]byte("other")), r.Nonce),
		"key":     other.Opening(r.RequestID, r.Nonce),
	} {
		if o == d.Opening {
			t.Errorf("another %s gives the same opening", name)
		}
	}

	tests := []struct {
		name string
		mod  func(*Disclosure, *Receipt)
	}{
		{"other output", func(d *Disclosure, _ *Receipt) { d.Output = []uint32{7, 8, 10} }},
		{"truncated output", func(d *Disclosure, _ *Receipt) { d.Output = d.Output[:2] }},
		{"other payload", func(d *Disclosure, _ *Receipt) { d.Payload = PayloadDigest([]uint32{1, 2}) }},
		{"other opening", func(d *Disclosure, _ *Receipt) { d.Opening[0] ^= 1 }},
		{"other receipt's request", func(_ *Disclosure, r *Receipt) { r.RequestID[0] ^= 1 }},
		{"no commitment", func(_ *Disclosure, r *Receipt) { r.OutputCommitment = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dd, rr := d, r
			dd.Output = append([]uint32(nil), d.Output...)
			tt.mod(&dd, &rr)
			if dd.Opens(&rr) {
				t.Fatal("disclosure opens")
			}
		})
	}
	if _, err := s.Disclose(&r, prompt, []uint32{1}); !errors.Is(err, ErrNotOpened) {
		t.Fatalf("Disclose of the wrong output: %v, want ErrNotOpened", err)
	}
	if _, err := other.Disclose(&r, prompt, output); err == nil {
		t.Fatal("another steward disclosed the receipt")
	}
}
