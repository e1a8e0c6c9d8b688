package receipt

import "fmt"

// Fidelity is the ordered mesh/1 quality scale (§3.2): F0 the coarsest
// sufficient answer, F4 frontier grade. It is encoded as its uint level.
type Fidelity uint8

// The five levels of §3.2.
const (
	F0 Fidelity = iota
	F1
	F2
	F3
	F4
)

// Valid reports whether f is one of F0 … F4.
func (f Fidelity) Valid() bool { return f <= F4 }

// String returns "F0" … "F4".
func (f Fidelity) String() string {
	if f.Valid() {
		return fmt.Sprintf("F%d", uint8(f))
	}
	return fmt.Sprintf("Fidelity(%d)", uint8(f))
}

// ParseFidelity parses "F0" … "F4".
func ParseFidelity(s string) (Fidelity, error) {
	if len(s) == 2 && s[0] == 'F' && '0' <= s[1] && s[1] <= '4' {
		return Fidelity(s[1] - '0'), nil
	}
	return 0, fmt.Errorf("%w: fidelity %q is not F0 … F4", ErrMalformed, s)
}
