package receipt

import "errors"

// Sentinel errors; every error the package returns wraps one of them (or
// hw.ErrCoupling, for an energy figure that breaks the §3.3 coupling), so
// callers branch with errors.Is.
var (
	// ErrMalformed: bytes that are not a well-formed mesh/1 value (bad
	// CBOR, wrong types, unknown or missing fields, a bad hex id).
	ErrMalformed = errors.New("receipt: malformed")
	// ErrNonCanonical: well-formed CBOR that is not the canonical det-CBOR
	// encoding of the value it decodes to, so it is not the signed form.
	ErrNonCanonical = errors.New("receipt: not canonical det-CBOR")
	// ErrTooLarge: input over the decoder's length bound.
	ErrTooLarge = errors.New("receipt: input too large")
	// ErrInvalid: a value that decodes but breaks a mesh/1 rule (an
	// unpaired optional, a derived figure that does not match, a
	// delivered fidelity above the advertised one, ...). Such a receipt
	// cannot be sealed.
	ErrInvalid = errors.New("receipt: invalid")
	// ErrSignature: an envelope whose signature does not verify under the
	// key its kid names, or that is signed by another steward than the
	// caller required.
	ErrSignature = errors.New("receipt: bad signature")
	// ErrEnvelope: a COSE_Sign1 envelope outside the mesh/1 profile
	// (untagged, another algorithm, extra or missing header parameters,
	// detached payload).
	ErrEnvelope = errors.New("receipt: envelope outside the mesh/1 profile")
	// ErrChain: a receipt log whose sequence/prev links do not hold.
	ErrChain = errors.New("receipt: broken hash chain")
	// ErrNotOpened: a disclosure that does not open the receipt's output
	// commitment.
	ErrNotOpened = errors.New("receipt: disclosure does not open the output commitment")
)
