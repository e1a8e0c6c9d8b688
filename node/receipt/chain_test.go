package receipt

import (
	"errors"
	"slices"
	"testing"
)

// buildLog seals n receipts in one chain from start.
func buildLog(t testing.TB, s *Sealer, start Head, n int) ([][]byte, Head) {
	t.Helper()
	h := start
	var envs [][]byte
	for i := range n {
		r := generation(t, s)
		r.Nonce[1] = byte(i)
		h.Stamp(&r)
		sealed, err := s.Seal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Check(sealed); err != nil {
			t.Fatal(err)
		}
		h = h.Advance(sealed)
		envs = append(envs, sealed.Envelope)
	}
	return envs, h
}

func TestVerifyLog(t *testing.T) {
	s, other := testSealer(t, 1), testSealer(t, 2)
	envs, head := buildLog(t, s, Head{}, 5)
	if head.Next != 5 || head.Last != Sum(envs[4]) {
		t.Fatalf("head after 5 = %+v", head)
	}
	for _, steward := range [][]byte{nil, s.Public()} {
		got, err := VerifyLog(envs, Head{}, steward)
		if err != nil || got != head {
			t.Fatalf("VerifyLog = %+v, %v; want %+v", got, err, head)
		}
	}
	// A log resumed after a restart continues the chain.
	more, head2 := buildLog(t, s, head, 3)
	if got, err := VerifyLog(more, head, s.Public()); err != nil || got != head2 {
		t.Fatalf("resumed VerifyLog = %+v, %v", got, err)
	}
	if got, err := VerifyLog(append(slices.Clone(envs), more...), Head{}, nil); err != nil || got != head2 {
		t.Fatalf("whole VerifyLog = %+v, %v", got, err)
	}

	// resealed re-seals receipt i with different content under the same
	// key and chain position: it verifies alone, but its id changes.
	resealed := func(i int) []byte {
		sealed, err := Open(envs[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		r := sealed.Receipt
		r.TokensIn++
		again, err := s.Seal(r)
		if err != nil {
			t.Fatal(err)
		}
		return again.Envelope
	}
	replace := func(i int, env []byte) [][]byte {
		c := slices.Clone(envs)
		c[i] = env
		return c
	}
	foreign, _ := buildLog(t, other, Head{}, 1)
	tests := []struct {
		name    string
		log     [][]byte
		start   Head
		steward []byte
		index   int
		err     error
	}{
		{"byte flipped in 2", replace(2, func() []byte { b := slices.Clone(envs[2]); b[100] ^= 1; return b }()), Head{}, nil, 2, ErrSignature},
		{"2 altered and resealed", replace(2, resealed(2)), Head{}, nil, 3, ErrChain},
		{"last altered and resealed", replace(4, resealed(4)), Head{}, nil, -1, nil},
		{"1 dropped", slices.Delete(slices.Clone(envs), 1, 2), Head{}, nil, 1, ErrChain},
		{"2 and 3 swapped", func() [][]byte { c := slices.Clone(envs); c[2], c[3] = c[3], c[2]; return c }(), Head{}, nil, 2, ErrChain},
		{"starts past genesis", envs[1:], Head{}, nil, 0, ErrChain},
		{"genesis where a resume was due", envs, head, nil, 0, ErrChain},
		{"another steward's genesis", foreign, Head{}, s.Public(), 0, ErrSignature},
		{"another steward midway", replace(0, foreign[0]), Head{}, nil, 1, ErrSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VerifyLog(tt.log, tt.start, tt.steward)
			if tt.index < 0 {
				// Altering the last envelope is caught by the next one
				// only; alone it is a valid log with a different head.
				if err != nil {
					t.Fatalf("VerifyLog: %v", err)
				}
				return
			}
			var le *LinkError
			if !errors.As(err, &le) || le.Index != tt.index || !errors.Is(err, tt.err) {
				t.Fatalf("VerifyLog error = %v, want a LinkError at %d wrapping %v", err, tt.index, tt.err)
			}
		})
	}
}
