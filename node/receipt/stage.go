package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"

	"github.com/meshnode/meshnode/hw"
)

// Stage reports: the receipt of a serve whose model ran split into layer
// stages across nodes (docs/stage-protocol.md).
//
// Each stage meters its own part of a serve on its own counters, under the
// rules a serve is metered by, and signs a StageReport under its node key
// in the receipt's own envelope profile (COSE_Sign1, EdDSA, kid = its
// did:key). The head, stage 0, reports its own part the same way, under
// the key that seals its receipts, and its receipt carries every stage's
// signed report in layer order under the meshnode extension key `stages`.
// The receipt's energy is then their sum: estimated_uj the sum of the
// estimates, measured_uj the sum of the measurements when every part has
// one (absent otherwise), energy_provenance the weakest part's grade, so a
// total is HwShunt only when every part is. Absent, the core is mesh/1's
// byte for byte: a serve that was not split carries no `stages`.

// StageProfile is the mesh_stage_report tag of every report.
const StageProfile = "meshnode-stage/1"

// MaxStageReports is the most reports one receipt carries: the decoder's
// array bound, and far more stages than a plan makes.
const MaxStageReports = MaxStops

// maxStageCoreSize bounds a report's signed core; a real one is about
// 400 bytes.
const maxStageCoreSize = 2 << 10

// MaxStageEnvelope bounds a report's envelope: its core, the protected
// header with its kid, and a signature.
const MaxStageEnvelope = maxStageCoreSize + 512

// StageReport is one stage's statement of its part of a serve: the
// serve's request id, the weights it ran, its layer range [Lo, Hi), the
// positions it processed (Tokens, counting again a position recomputed
// after a trim), the energy its own meter billed, and the node that ran
// it (its did:key, the report's signer).
type StageReport struct {
	RequestID ContentID
	Weights   ContentID
	Lo, Hi    uint32
	Tokens    uint32
	Energy    hw.Energy
	Node      string
}

// SignedStageReport is a report with the envelope that signs it.
type SignedStageReport struct {
	StageReport
	Envelope []byte
}

// Validate checks what a report's types do not.
func (r *StageReport) Validate() error {
	if r.Lo >= r.Hi {
		return fmt.Errorf("%w: layers [%d, %d)", ErrInvalid, r.Lo, r.Hi)
	}
	if _, err := parseDIDKey(r.Node); err != nil {
		return fmt.Errorf("%w: node: %w", ErrInvalid, err)
	}
	return nil
}

type wireStageReport struct {
	Profile          string    `cbor:"mesh_stage_report"`
	RequestID        ContentID `cbor:"request_id"`
	WeightsDigest    ContentID `cbor:"weights_digest"`
	LayerLo          uint32    `cbor:"layer_lo"`
	LayerHi          uint32    `cbor:"layer_hi"`
	Tokens           uint32    `cbor:"tokens"`
	EstimatedUJ      uint64    `cbor:"estimated_uj"`
	MeasuredUJ       *uint64   `cbor:"measured_uj,omitempty"`
	EnergyProvenance string    `cbor:"energy_provenance"`
	Node             string    `cbor:"node"`
}

// Core returns the report's signed core, canonical det-CBOR.
func (r *StageReport) Core() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	w := wireStageReport{
		Profile: StageProfile, RequestID: r.RequestID, WeightsDigest: r.Weights,
		LayerLo: r.Lo, LayerHi: r.Hi, Tokens: r.Tokens,
		EstimatedUJ: r.Energy.EstimatedUJ(), MeasuredUJ: optional(r.Energy.MeasuredUJ()),
		EnergyProvenance: r.Energy.Provenance().String(), Node: r.Node,
	}
	core, err := encMode.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(core) > maxStageCoreSize {
		return nil, fmt.Errorf("%w: stage report core of %d bytes, limit %d", ErrTooLarge, len(core), maxStageCoreSize)
	}
	return core, nil
}

// DecodeStageCore parses a report's signed core, refusing anything but
// the canonical encoding of a valid report.
func DecodeStageCore(b []byte) (StageReport, error) {
	var w wireStageReport
	if err := decodeCanonical(b, maxStageCoreSize, &w); err != nil {
		return StageReport{}, fmt.Errorf("stage report: %w", err)
	}
	if w.Profile != StageProfile {
		return StageReport{}, fmt.Errorf("stage report: %w: mesh_stage_report %q, want %q", ErrInvalid, truncate(w.Profile), StageProfile)
	}
	prov, err := hw.ParseProvenance(w.EnergyProvenance)
	if err != nil {
		return StageReport{}, fmt.Errorf("stage report: %w: %v", ErrInvalid, err)
	}
	energy, err := hw.NewEnergy(prov, w.MeasuredUJ, w.EstimatedUJ)
	if err != nil {
		return StageReport{}, fmt.Errorf("stage report: %w: %w", ErrInvalid, err)
	}
	r := StageReport{RequestID: w.RequestID, Weights: w.WeightsDigest, Lo: w.LayerLo, Hi: w.LayerHi,
		Tokens: w.Tokens, Energy: energy, Node: w.Node}
	if err := r.Validate(); err != nil {
		return StageReport{}, fmt.Errorf("stage report: %w", err)
	}
	return r, nil
}

// SignStageReport signs r under the sealer's key, the node key of the
// stage that ran it. r.Node is set to the sealer's did:key when empty and
// must equal it otherwise.
func (s *Sealer) SignStageReport(r StageReport) (SignedStageReport, error) {
	if r.Node == "" {
		r.Node = s.did
	} else if r.Node != s.did {
		return SignedStageReport{}, fmt.Errorf("stage report: %w: node %q is not the signer %q", ErrStageSigner, truncate(r.Node), s.did)
	}
	core, err := r.Core()
	if err != nil {
		return SignedStageReport{}, fmt.Errorf("stage report: %w", err)
	}
	env, err := s.SealPayload(core)
	if err != nil {
		return SignedStageReport{}, err
	}
	return SignedStageReport{StageReport: r, Envelope: env}, nil
}

// OpenStageReport verifies a report's envelope, that the key it is signed
// under is the node the report names, and returns the report.
func OpenStageReport(envelope []byte) (SignedStageReport, error) {
	if len(envelope) > MaxStageEnvelope {
		return SignedStageReport{}, fmt.Errorf("stage report: %w: %d bytes, limit %d", ErrTooLarge, len(envelope), MaxStageEnvelope)
	}
	payload, kid, err := OpenPayload(envelope, nil)
	if err != nil {
		return SignedStageReport{}, fmt.Errorf("stage report: %w", err)
	}
	r, err := DecodeStageCore(payload)
	if err != nil {
		return SignedStageReport{}, err
	}
	if r.Node != kid {
		return SignedStageReport{}, fmt.Errorf("stage report: %w: names node %s, signed by %s", ErrStageSigner, truncate(r.Node), kid)
	}
	return SignedStageReport{StageReport: r, Envelope: bytes.Clone(envelope)}, nil
}

// SignedBy reports whether the report's node is the Ed25519 key pub (a
// node's endpoint id is its public key).
func (r *StageReport) SignedBy(pub ed25519.PublicKey) bool {
	k, err := parseDIDKey(r.Node)
	return err == nil && k.Equal(pub)
}

// Errors of a receipt's stage reports. Each comes inside a *StageError
// naming the report, itself under ErrInvalid.
var (
	// ErrStageSigner: a report signed by another key than the node it
	// names, or the head's report not signed by the receipt's steward.
	ErrStageSigner = errors.New("receipt: stage report signed by another node than it names")
	// ErrStageRange: the reports' layer ranges do not start at 0 and follow
	// one another.
	ErrStageRange = errors.New("receipt: stage layer ranges not contiguous")
	// ErrStageTotal: the receipt's energy is not the sum of the reports'.
	ErrStageTotal = errors.New("receipt: energy is not the total of the stage reports")
	// ErrStageMismatch: a report for another request or other weights than
	// the receipt's.
	ErrStageMismatch = errors.New("receipt: stage report for another serve")
)

// StageError is a receipt's stage report that does not verify: Index is
// its place in `stages` (-1 for the set as a whole: too many, too few,
// or a total that does not add up).
type StageError struct {
	Index int
	Err   error
}

func (e *StageError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("stages: %v", e.Err)
	}
	return fmt.Sprintf("stages[%d]: %v", e.Index, e.Err)
}

func (e *StageError) Unwrap() error { return e.Err }

// SumEnergy is the total of parts: the estimates summed, the measurements
// summed when every part has one (absent otherwise), graded as the
// weakest part (a total is no better measured than its worst meter).
func SumEnergy(parts ...hw.Energy) (hw.Energy, error) {
	if len(parts) == 0 {
		return hw.Estimated(0), nil
	}
	var est, meas uint64
	measured := true
	prov := hw.HwShunt
	for _, p := range parts {
		var c uint64
		if est, c = bits.Add64(est, p.EstimatedUJ(), 0); c != 0 {
			return hw.Energy{}, fmt.Errorf("%w: estimated_uj overflows", ErrStageTotal)
		}
		if m, ok := p.MeasuredUJ(); ok && measured {
			if meas, c = bits.Add64(meas, m, 0); c != 0 {
				return hw.Energy{}, fmt.Errorf("%w: measured_uj overflows", ErrStageTotal)
			}
		} else {
			measured = false
		}
		prov = min(prov, p.Provenance())
	}
	var m *uint64
	if measured {
		m = &meas
	}
	// Every part that has no measurement is ModelBased at best, so the
	// coupling holds for the weakest grade; NewEnergy checks it anyway.
	if prov == hw.Estimator {
		m = nil
	}
	return hw.NewEnergy(prov, m, est)
}

// checkStages verifies a receipt's stage reports (VerifyStages).
func (r *Receipt) checkStages() error {
	if len(r.Stages) == 0 {
		return nil
	}
	return VerifyStages(r.RequestID, r.Weights, r.Steward, r.Stages, r.Energy)
}

// VerifyStages verifies the stage reports of a split serve of request
// on weights, sealed by steward with energy: each envelope opens under
// the node it names and says what the struct holds, the first is the
// steward's own (stage 0), the ranges start at layer 0 and follow one
// another, every report is for the request and weights, and energy is
// their total (SumEnergy). Errors wrap ErrInvalid and a *StageError
// naming the report, which wraps ErrSignature, ErrEnvelope,
// ErrStageSigner, ErrStageRange, ErrStageMismatch or ErrStageTotal.
func VerifyStages(request ContentID, weights *Weights, steward string, stages []SignedStageReport, energy hw.Energy) error {
	n := len(stages)
	set := func(err error) error { return fmt.Errorf("%w: %w", ErrInvalid, &StageError{Index: -1, Err: err}) }
	one := func(i int, err error) error { return fmt.Errorf("%w: %w", ErrInvalid, &StageError{Index: i, Err: err}) }
	switch {
	case n < 2:
		return set(fmt.Errorf("%w: one stage is not a split", ErrStageRange))
	case n > MaxStageReports:
		return set(fmt.Errorf("%d reports, limit %d", n, MaxStageReports))
	case weights == nil:
		return set(fmt.Errorf("%w: stage reports without weights_digest", ErrStageMismatch))
	}
	parts := make([]hw.Energy, n)
	var hi uint32
	for i, s := range stages {
		opened, err := OpenStageReport(s.Envelope)
		if err != nil {
			return one(i, err)
		}
		if opened.StageReport != s.StageReport {
			return one(i, fmt.Errorf("%w: the report does not say what its envelope signs", ErrStageMismatch))
		}
		switch {
		case s.RequestID != request:
			return one(i, fmt.Errorf("%w: request %s, the receipt's is %s", ErrStageMismatch, s.RequestID, request))
		case s.Weights != weights.Digest:
			return one(i, fmt.Errorf("%w: weights %s, the receipt's are %s", ErrStageMismatch, s.Weights, weights.Digest))
		case i == 0 && s.Node != steward:
			return one(i, fmt.Errorf("%w: stage 0 is signed by %s, not the steward %s", ErrStageSigner, truncate(s.Node), truncate(steward)))
		case s.Lo != hi:
			return one(i, fmt.Errorf("%w: layers [%d, %d) after layer %d", ErrStageRange, s.Lo, s.Hi, hi))
		}
		hi = s.Hi
		parts[i] = s.Energy
	}
	total, err := SumEnergy(parts...)
	if err != nil {
		return set(err)
	}
	if total != energy {
		return set(fmt.Errorf("%w: the receipt says %v, the reports add up to %v", ErrStageTotal, energy, total))
	}
	return nil
}

// stageEnvelope is one signed report in the receipt's `stages` array: a
// byte string in the core, hex in the JSON form (as every id is).
type stageEnvelope []byte

func (e stageEnvelope) MarshalCBOR() ([]byte, error) { return encMode.Marshal([]byte(e)) }

func (e *stageEnvelope) UnmarshalCBOR(b []byte) error {
	var v []byte
	if err := decMode.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%w: stage report: %v", ErrMalformed, err)
	}
	*e = v
	return nil
}

func (e stageEnvelope) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(e)), nil }

func (e *stageEnvelope) UnmarshalText(b []byte) error {
	if len(b) > 2*MaxStageEnvelope {
		return fmt.Errorf("%w: stage report of %d hex digits, limit %d", ErrTooLarge, len(b), 2*MaxStageEnvelope)
	}
	v := make([]byte, len(b)/2)
	if err := parseLowerHex(v, string(b)); err != nil {
		return fmt.Errorf("%w: stage report: %v", ErrMalformed, err)
	}
	*e = v
	return nil
}

func wireStages(ss []SignedStageReport) []stageEnvelope {
	if len(ss) == 0 {
		return nil
	}
	out := make([]stageEnvelope, len(ss))
	for i, s := range ss {
		out[i] = s.Envelope
	}
	return out
}

// openStages opens every report of a decoded receipt; checkStages, by way
// of Validate, checks them as a set.
func openStages(envs []stageEnvelope) ([]SignedStageReport, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	if len(envs) > MaxStageReports {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, &StageError{Index: -1, Err: fmt.Errorf("%d reports, limit %d", len(envs), MaxStageReports)})
	}
	out := make([]SignedStageReport, len(envs))
	for i, e := range envs {
		s, err := OpenStageReport(e)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, &StageError{Index: i, Err: err})
		}
		out[i] = s
	}
	return out, nil
}
