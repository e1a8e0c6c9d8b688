package receipt

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/zeebo/blake3"
)

// Domain prefixes of §6.4, NUL-terminated as the spec writes them.
const (
	payloadDomain    = "mesh/1 prompt payload\x00"
	commitmentDomain = "mesh/1 output commitment\x00"
)

// Opening is the 32-byte value that opens one receipt's output commitment
// (§6.4). Without it the commitment reveals nothing about the tokens.
type Opening [32]byte

// String returns the lowercase hex form.
func (o Opening) String() string { return hex.EncodeToString(o[:]) }

// MarshalText implements encoding.TextMarshaler.
func (o Opening) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (o *Opening) UnmarshalText(b []byte) error {
	if err := parseLowerHex(o[:], string(b)); err != nil {
		return fmt.Errorf("%w: opening: %v", ErrMalformed, err)
	}
	return nil
}

// PayloadDigest is §6.4's payload: BLAKE3("mesh/1 prompt payload\0" ‖
// prompt), the prompt token ids as little-endian u32s in order.
func PayloadDigest(prompt []uint32) ContentID {
	h := blake3.New()
	h.WriteString(payloadDomain)
	writeTokens(h, prompt)
	return sum(h)
}

// Commit is §6.4's output_commitment: BLAKE3("mesh/1 output commitment\0"
// ‖ opening ‖ request_id ‖ payload ‖ tokens).
func Commit(opening Opening, requestID, payload ContentID, tokens []uint32) ContentID {
	h := blake3.New()
	h.WriteString(commitmentDomain)
	h.Write(opening[:])
	h.Write(requestID[:])
	h.Write(payload[:])
	writeTokens(h, tokens)
	return sum(h)
}

func sum(h *blake3.Hasher) (c ContentID) {
	h.Sum(c[:0])
	return c
}

func writeTokens(h *blake3.Hasher, toks []uint32) {
	var buf [4096]byte
	for len(toks) > 0 {
		n := min(len(toks), len(buf)/4)
		for i, t := range toks[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		h.Write(buf[:4*n])
		toks = toks[n:]
	}
}

// Opening derives the opening of the receipt with this request id and
// nonce. The spec asks for a value derived per request from a key the
// steward holds; meshnode keys BLAKE3 with a key derived from the steward
// key (so a restarted steward can disclose any receipt's opening without
// storing it) over request_id ‖ nonce. Taking the nonce in makes the
// opening per receipt: disclosing one serve of a request opens no other
// serve of the same request.
func (s *Sealer) Opening(requestID ContentID, nonce Nonce) Opening {
	h, err := blake3.NewKeyed(s.openingKey[:])
	if err != nil {
		panic(err) // the key is 32 bytes by construction
	}
	h.Write(requestID[:])
	h.Write(nonce[:])
	var o Opening
	h.Sum(o[:0])
	return o
}

// Disclosure is what a steward hands out to disclose one receipt's output:
// the output, the opening and the payload digest, with which anyone can
// check that this is the output the receipt sealed (§6.4).
type Disclosure struct {
	Opening Opening   `json:"opening"`
	Payload ContentID `json:"payload"`
	Output  []uint32  `json:"output"`
}

// Opens reports whether d opens r's output commitment.
func (d *Disclosure) Opens(r *Receipt) bool {
	return r.OutputCommitment != nil && Commit(d.Opening, r.RequestID, d.Payload, d.Output) == *r.OutputCommitment
}

// Disclose builds the disclosure of r, a receipt this sealer sealed, for
// the prompt it was served on and the output it produced, and checks that
// it opens the commitment.
func (s *Sealer) Disclose(r *Receipt, prompt, output []uint32) (Disclosure, error) {
	if r.Steward != s.did {
		return Disclosure{}, fmt.Errorf("receipt: disclose: sealed by %s, not this steward", truncate(r.Steward))
	}
	d := Disclosure{Opening: s.Opening(r.RequestID, r.Nonce), Payload: PayloadDigest(prompt), Output: output}
	if !d.Opens(r) {
		return Disclosure{}, fmt.Errorf("receipt: disclose: %w", ErrNotOpened)
	}
	return d, nil
}
