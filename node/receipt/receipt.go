package receipt

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/meshnode/meshnode/hw"
)

// Profile is the mesh_receipt tag of every receipt this package writes.
const Profile = "mesh/1"

// maxCoreSize bounds a signed core. A real core is well under 2 KiB; the
// only unbounded-looking fields are names and the route line, which a
// steward writes itself.
const maxCoreSize = 16 << 10

// Receipt is a MeshReceipt (§6.1). Optional parts that the spec pairs are
// pointers to pairs, so an unpaired one cannot be expressed; the energy is
// an [hw.Energy], whose constructors refuse a figure that breaks the §3.3
// coupling, so an unsealable figure cannot be built either. The derived
// figures (uj_per_accepted_token, uj_per_decision, uj_per_option_scored)
// are computed when the core is encoded and checked when it is decoded;
// they are not fields, so they cannot disagree with the figures they are
// derived from.
type Receipt struct {
	RequestID ContentID
	// GrantID is the grant the serve debited; nil when it rode on none.
	GrantID *ContentID
	// Backend is the registered backend that served; Recipe the composed
	// model it ran, by name.
	Backend, Recipe string
	// Weights binds the weights that answered; nil binds the model by
	// recipe alone (§3.6).
	Weights *Weights
	// Training binds the corpus the weights were fitted to (§3.7).
	Training *Training
	// Route is the router's one-line justification (§4).
	Route string

	TokensIn, TokensOut, TokensAccepted uint32
	CacheHitTokens                      uint32
	SpecProposed, SpecAccepted          uint32

	FidelityFloor Fidelity
	// Fidelity carries the advertised and delivered levels, together or
	// not at all (§3.2.1); nil when the backend reported no delivered
	// level.
	Fidelity *FidelityReport
	// FidelityMet is derived from the delivered level when there is one,
	// else from the advertisement; encoded 0|1.
	FidelityMet bool

	Energy hw.Energy

	// Decision is present iff the request was a typed decision (§3.6).
	Decision *DecisionFigures

	// GrantBreach is the JCP denial label when the debit breached the
	// grant; empty otherwise (§2).
	GrantBreach string
	// OutputCommitment commits to a generation's output (§6.4); nil for a
	// decision.
	OutputCommitment *ContentID
	// CutShort says why a generation ended before its engine would have
	// ended it (CutClient, CutCeiling, CutEngine, CutLimit); empty for one that ran
	// to its own end. Its output is then a prefix of what a re-run gives,
	// and a replay judges it so. A meshnode extension: absent, the core is
	// mesh/1's, byte for byte.
	CutShort string
	// Stages are the signed reports of a serve whose model ran split into
	// layer stages across nodes, in layer order, the first this steward's
	// own; Energy is then their total (stage.go). A meshnode extension:
	// nil on a serve that was not split, whose core is mesh/1's byte for
	// byte.
	Stages []SignedStageReport

	// Sequence and Prev are the hash-chain position (§6.3): Prev is the
	// content id of the previous envelope, nil exactly at sequence 0.
	Sequence uint64
	Prev     *ContentID
	// Nonce is the per-receipt nonce; Steward the sealing identity, the
	// did:key that is also the envelope's kid.
	Nonce   Nonce
	Steward string
}

// Weights is a content address of the weights that answered, with the
// precision the forward pass ran at (fp32, fp16, bf16, int8, … as the
// backend names it); §6.1 pairs them because neither reproduces alone.
type Weights struct {
	Digest    ContentID
	Precision string
}

// Training is the content address of a training corpus with what a
// verifier can do with it (§3.7).
type Training struct {
	Digest    ContentID
	Authority string // TrainingSigned, TrainingLogged or TrainingOpaque
}

// The three training_authority values §3.7 gives meaning to.
const (
	TrainingSigned = "signed"
	TrainingLogged = "logged"
	TrainingOpaque = "opaque"
)

// Why a generation was cut short (Receipt.CutShort).
const (
	// CutClient: the client stopped taking tokens (it went away, or its
	// stream stalled).
	CutClient = "client"
	// CutCeiling: the steward stopped it before one more step could pass
	// the request's joule ceiling.
	CutCeiling = "joule_ceiling"
	// CutEngine: the engine failed part-way.
	CutEngine = "engine"
	// CutLimit: a time limit the client set ended it (llama.cpp's
	// t_max_predict_ms and t_max_prompt_ms, which code editors send):
	// the output is what was made within it.
	CutLimit = "limit"
)

// FidelityReport is the advertised level the router admitted a backend on
// and the level the backend says it delivered (§3.2.1).
type FidelityReport struct {
	Advertised, Delivered Fidelity
}

// DecisionFigures are a typed decision's counters (§3.6).
type DecisionFigures struct {
	QuestionsAnswered, OptionsScored, SchemaTokens uint32
}

// Nonce is a receipt's 16-byte nonce, hex in the core (a meshnode
// assumption: §6.1 names the field without fixing its size or encoding).
type Nonce [16]byte

// String returns the lowercase hex form.
func (n Nonce) String() string { return hex.EncodeToString(n[:]) }

// MarshalText implements encoding.TextMarshaler.
func (n Nonce) MarshalText() ([]byte, error) { return []byte(n.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (n *Nonce) UnmarshalText(b []byte) error {
	if err := parseLowerHex(n[:], string(b)); err != nil {
		return fmt.Errorf("%w: nonce: %v", ErrMalformed, err)
	}
	return nil
}

// MarshalCBOR encodes the nonce as a hex text string.
func (n Nonce) MarshalCBOR() ([]byte, error) { return encMode.Marshal(n.String()) }

// UnmarshalCBOR decodes the hex text string form.
func (n *Nonce) UnmarshalCBOR(b []byte) error {
	var s string
	if err := decMode.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: nonce: %v", ErrMalformed, err)
	}
	return n.UnmarshalText([]byte(s))
}

// UJPerAcceptedToken is the wedge metric (§6.2): energy.uj() divided by
// tokens_accepted, rounded down (mesh/1 carries integers only); absent when
// no token was accepted.
func (r *Receipt) UJPerAcceptedToken() (uint64, bool) {
	if r.TokensAccepted == 0 {
		return 0, false
	}
	return r.Energy.UJ() / uint64(r.TokensAccepted), true
}

// UJPerDecision is energy.uj() / questions_answered, rounded down; present
// iff the receipt is a decision's (§3.6).
func (r *Receipt) UJPerDecision() (uint64, bool) {
	if r.Decision == nil || r.Decision.QuestionsAnswered == 0 {
		return 0, false
	}
	return r.Energy.UJ() / uint64(r.Decision.QuestionsAnswered), true
}

// UJPerOptionScored is energy.uj() / options_scored, rounded down. §3.6
// makes it a SHOULD; meshnode always carries it on a decision.
func (r *Receipt) UJPerOptionScored() (uint64, bool) {
	if r.Decision == nil || r.Decision.OptionsScored == 0 {
		return 0, false
	}
	return r.Energy.UJ() / uint64(r.Decision.OptionsScored), true
}

// Validate checks every rule a sealable receipt meets beyond what its types
// already guarantee.
func (r *Receipt) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case r.Backend == "":
		return bad("backend is empty")
	case r.Recipe == "":
		return bad("recipe is empty")
	case r.Route == "":
		return bad("route is empty")
	case !r.FidelityFloor.Valid():
		return bad("fidelity_floor %d is not F0 … F4", r.FidelityFloor)
	}
	// A sealed core must be one the strict decoder accepts, and it refuses
	// text that is not UTF-8: such a receipt would verify nowhere.
	text := [][2]string{{"backend", r.Backend}, {"recipe", r.Recipe}, {"route", r.Route}, {"grant_breach", r.GrantBreach}}
	if w := r.Weights; w != nil {
		if w.Precision == "" {
			return bad("weights_digest without precision")
		}
		text = append(text, [2]string{"precision", w.Precision})
	}
	for _, f := range text {
		if !utf8.ValidString(f[1]) {
			return bad("%s %q is not valid UTF-8", f[0], truncate(f[1]))
		}
	}
	if t := r.Training; t != nil {
		switch t.Authority {
		case TrainingSigned, TrainingLogged, TrainingOpaque:
		default:
			return bad("training_authority %q is not signed, logged or opaque", t.Authority)
		}
	}
	if f := r.Fidelity; f != nil {
		switch {
		case !f.Advertised.Valid() || !f.Delivered.Valid():
			return bad("fidelity %d/%d is not F0 … F4", f.Advertised, f.Delivered)
		case f.Delivered > f.Advertised:
			// §3.2.1: refused, never clamped.
			return bad("fidelity_delivered %v above fidelity_advertised %v", f.Delivered, f.Advertised)
		case r.FidelityMet != (f.Delivered >= r.FidelityFloor):
			return bad("fidelity_met %v does not follow from delivered %v against floor %v", r.FidelityMet, f.Delivered, r.FidelityFloor)
		}
	}
	if d := r.Decision; d != nil {
		switch {
		case d.QuestionsAnswered == 0:
			return bad("a decision answers at least one question")
		case d.OptionsScored < d.QuestionsAnswered:
			return bad("%d options scored over %d questions", d.OptionsScored, d.QuestionsAnswered)
		case r.OutputCommitment != nil:
			return bad("a decision carries no output_commitment (§6.4)")
		}
	}
	if r.GrantBreach != "" && r.GrantID == nil {
		return bad("grant_breach without grant_id")
	}
	switch r.CutShort {
	case "":
	case CutClient, CutCeiling, CutEngine, CutLimit:
		if r.Decision != nil {
			return bad("a decision is not cut short: an incomplete one is not sealed")
		}
		if r.TokensOut != r.TokensAccepted {
			return bad("a generation cut short accepted every token it emitted (tokens_out %d, tokens_accepted %d)", r.TokensOut, r.TokensAccepted)
		}
	default:
		return bad("cut_short %q is not %s, %s, %s or %s", truncate(r.CutShort), CutClient, CutCeiling, CutEngine, CutLimit)
	}
	if err := r.checkStages(); err != nil {
		return err
	}
	if (r.Prev == nil) != (r.Sequence == 0) {
		return bad("prev must be absent exactly at sequence 0 (sequence %d)", r.Sequence)
	}
	if _, err := parseDIDKey(r.Steward); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// wireReceipt is the §6.1 key set, shared by the CBOR core and the JSON
// form. Optional keys are pointers or strings with omitempty: absent, never
// null.
type wireReceipt struct {
	MeshReceipt        string          `cbor:"mesh_receipt" json:"mesh_receipt"`
	RequestID          ContentID       `cbor:"request_id" json:"request_id"`
	GrantID            *ContentID      `cbor:"grant_id,omitempty" json:"grant_id,omitempty"`
	Backend            string          `cbor:"backend" json:"backend"`
	Recipe             string          `cbor:"recipe" json:"recipe"`
	WeightsDigest      *ContentID      `cbor:"weights_digest,omitempty" json:"weights_digest,omitempty"`
	Precision          string          `cbor:"precision,omitempty" json:"precision,omitempty"`
	TrainingDigest     *ContentID      `cbor:"training_digest,omitempty" json:"training_digest,omitempty"`
	TrainingAuthority  string          `cbor:"training_authority,omitempty" json:"training_authority,omitempty"`
	Route              string          `cbor:"route" json:"route"`
	TokensIn           uint32          `cbor:"tokens_in" json:"tokens_in"`
	TokensOut          uint32          `cbor:"tokens_out" json:"tokens_out"`
	TokensAccepted     uint32          `cbor:"tokens_accepted" json:"tokens_accepted"`
	CacheHitTokens     uint32          `cbor:"cache_hit_tokens" json:"cache_hit_tokens"`
	SpecProposed       uint32          `cbor:"spec_proposed" json:"spec_proposed"`
	SpecAccepted       uint32          `cbor:"spec_accepted" json:"spec_accepted"`
	FidelityFloor      Fidelity        `cbor:"fidelity_floor" json:"fidelity_floor"`
	FidelityAdvertised *Fidelity       `cbor:"fidelity_advertised,omitempty" json:"fidelity_advertised,omitempty"`
	FidelityDelivered  *Fidelity       `cbor:"fidelity_delivered,omitempty" json:"fidelity_delivered,omitempty"`
	FidelityMet        uint8           `cbor:"fidelity_met" json:"fidelity_met"`
	EstimatedUJ        uint64          `cbor:"estimated_uj" json:"estimated_uj"`
	MeasuredUJ         *uint64         `cbor:"measured_uj,omitempty" json:"measured_uj,omitempty"`
	UJPerAcceptedToken *uint64         `cbor:"uj_per_accepted_token,omitempty" json:"uj_per_accepted_token,omitempty"`
	QuestionsAnswered  *uint32         `cbor:"questions_answered,omitempty" json:"questions_answered,omitempty"`
	OptionsScored      *uint32         `cbor:"options_scored,omitempty" json:"options_scored,omitempty"`
	SchemaTokens       *uint32         `cbor:"schema_tokens,omitempty" json:"schema_tokens,omitempty"`
	UJPerDecision      *uint64         `cbor:"uj_per_decision,omitempty" json:"uj_per_decision,omitempty"`
	UJPerOptionScored  *uint64         `cbor:"uj_per_option_scored,omitempty" json:"uj_per_option_scored,omitempty"`
	EnergyProvenance   string          `cbor:"energy_provenance" json:"energy_provenance"`
	GrantBreach        string          `cbor:"grant_breach,omitempty" json:"grant_breach,omitempty"`
	OutputCommitment   *ContentID      `cbor:"output_commitment,omitempty" json:"output_commitment,omitempty"`
	CutShort           string          `cbor:"cut_short,omitempty" json:"cut_short,omitempty"`
	Stages             []stageEnvelope `cbor:"stages,omitempty" json:"stages,omitempty"`
	Sequence           uint64          `cbor:"sequence" json:"sequence"`
	Prev               *ContentID      `cbor:"prev,omitempty" json:"prev,omitempty"`
	Nonce              Nonce           `cbor:"nonce" json:"nonce"`
	Steward            string          `cbor:"steward" json:"steward"`
}

func optional[T any](v T, ok bool) *T {
	if !ok {
		return nil
	}
	return &v
}

func (r *Receipt) wire() wireReceipt {
	w := wireReceipt{
		MeshReceipt:      Profile,
		RequestID:        r.RequestID,
		GrantID:          r.GrantID,
		Backend:          r.Backend,
		Recipe:           r.Recipe,
		Route:            r.Route,
		TokensIn:         r.TokensIn,
		TokensOut:        r.TokensOut,
		TokensAccepted:   r.TokensAccepted,
		CacheHitTokens:   r.CacheHitTokens,
		SpecProposed:     r.SpecProposed,
		SpecAccepted:     r.SpecAccepted,
		FidelityFloor:    r.FidelityFloor,
		EstimatedUJ:      r.Energy.EstimatedUJ(),
		MeasuredUJ:       optional(r.Energy.MeasuredUJ()),
		EnergyProvenance: r.Energy.Provenance().String(),
		GrantBreach:      r.GrantBreach,
		OutputCommitment: r.OutputCommitment,
		CutShort:         r.CutShort,
		Stages:           wireStages(r.Stages),
		Sequence:         r.Sequence,
		Prev:             r.Prev,
		Nonce:            r.Nonce,
		Steward:          r.Steward,
	}
	w.UJPerAcceptedToken = optional(r.UJPerAcceptedToken())
	if r.FidelityMet {
		w.FidelityMet = 1
	}
	if r.Weights != nil {
		w.WeightsDigest, w.Precision = &r.Weights.Digest, r.Weights.Precision
	}
	if r.Training != nil {
		w.TrainingDigest, w.TrainingAuthority = &r.Training.Digest, r.Training.Authority
	}
	if f := r.Fidelity; f != nil {
		w.FidelityAdvertised, w.FidelityDelivered = &f.Advertised, &f.Delivered
	}
	if d := r.Decision; d != nil {
		w.QuestionsAnswered, w.OptionsScored, w.SchemaTokens = &d.QuestionsAnswered, &d.OptionsScored, &d.SchemaTokens
		w.UJPerDecision = optional(r.UJPerDecision())
		w.UJPerOptionScored = optional(r.UJPerOptionScored())
	}
	return w
}

// receipt rebuilds a Receipt from its wire form, refusing anything a
// sealer could not have written: a foreign profile, an unpaired optional,
// an energy figure that breaks the coupling (via hw.NewEnergy), a derived
// figure that does not match, then everything Validate checks.
func (w *wireReceipt) receipt() (Receipt, error) {
	bad := func(format string, a ...any) (Receipt, error) {
		return Receipt{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	if w.MeshReceipt != Profile {
		return bad("mesh_receipt %q, want %q", truncate(w.MeshReceipt), Profile)
	}
	prov, err := hw.ParseProvenance(w.EnergyProvenance)
	if err != nil {
		return bad("%v", err)
	}
	energy, err := hw.NewEnergy(prov, w.MeasuredUJ, w.EstimatedUJ)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r := Receipt{
		RequestID:        w.RequestID,
		GrantID:          w.GrantID,
		Backend:          w.Backend,
		Recipe:           w.Recipe,
		Route:            w.Route,
		TokensIn:         w.TokensIn,
		TokensOut:        w.TokensOut,
		TokensAccepted:   w.TokensAccepted,
		CacheHitTokens:   w.CacheHitTokens,
		SpecProposed:     w.SpecProposed,
		SpecAccepted:     w.SpecAccepted,
		FidelityFloor:    w.FidelityFloor,
		Energy:           energy,
		GrantBreach:      w.GrantBreach,
		OutputCommitment: w.OutputCommitment,
		CutShort:         w.CutShort,
		Sequence:         w.Sequence,
		Prev:             w.Prev,
		Nonce:            w.Nonce,
		Steward:          w.Steward,
	}
	switch w.FidelityMet {
	case 0:
	case 1:
		r.FidelityMet = true
	default:
		return bad("fidelity_met is %d, want 0 or 1", w.FidelityMet)
	}
	if (w.WeightsDigest == nil) != (w.Precision == "") {
		return bad("weights_digest and precision come together or not at all")
	}
	if w.WeightsDigest != nil {
		r.Weights = &Weights{Digest: *w.WeightsDigest, Precision: w.Precision}
	}
	if (w.TrainingDigest == nil) != (w.TrainingAuthority == "") {
		return bad("training_digest and training_authority come together or not at all")
	}
	if w.TrainingDigest != nil {
		r.Training = &Training{Digest: *w.TrainingDigest, Authority: w.TrainingAuthority}
	}
	if (w.FidelityAdvertised == nil) != (w.FidelityDelivered == nil) {
		return bad("fidelity_advertised and fidelity_delivered come together or not at all")
	}
	if w.FidelityAdvertised != nil {
		r.Fidelity = &FidelityReport{Advertised: *w.FidelityAdvertised, Delivered: *w.FidelityDelivered}
	}
	decisionKeys := countSet(w.QuestionsAnswered != nil, w.OptionsScored != nil, w.SchemaTokens != nil,
		w.UJPerDecision != nil, w.UJPerOptionScored != nil)
	switch decisionKeys {
	case 0:
	case 5:
		r.Decision = &DecisionFigures{QuestionsAnswered: *w.QuestionsAnswered, OptionsScored: *w.OptionsScored, SchemaTokens: *w.SchemaTokens}
	default:
		return bad("the decision keys come all together or not at all (%d of 5 present)", decisionKeys)
	}
	if r.Stages, err = openStages(w.Stages); err != nil {
		return Receipt{}, err
	}
	if err := r.Validate(); err != nil {
		return Receipt{}, err
	}
	// Derived figures must be exactly what the sealer would compute.
	derived := r.wire()
	if !sameOpt(w.UJPerAcceptedToken, derived.UJPerAcceptedToken) {
		return bad("uj_per_accepted_token %s, want %s", fmtOpt(w.UJPerAcceptedToken), fmtOpt(derived.UJPerAcceptedToken))
	}
	if !sameOpt(w.UJPerDecision, derived.UJPerDecision) {
		return bad("uj_per_decision %s, want %s", fmtOpt(w.UJPerDecision), fmtOpt(derived.UJPerDecision))
	}
	if !sameOpt(w.UJPerOptionScored, derived.UJPerOptionScored) {
		return bad("uj_per_option_scored %s, want %s", fmtOpt(w.UJPerOptionScored), fmtOpt(derived.UJPerOptionScored))
	}
	return r, nil
}

func countSet(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func sameOpt(a, b *uint64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func fmtOpt(v *uint64) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprint(*v)
}

// Core returns the signed core: the canonical det-CBOR encoding of r. It
// refuses a receipt that Validate refuses, and one whose core is over the
// bound DecodeCore holds every core to, which would verify nowhere.
func (r *Receipt) Core() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	w := r.wire()
	core, err := encMode.Marshal(&w)
	if err != nil {
		return nil, err
	}
	if len(core) > maxCoreSize {
		return nil, fmt.Errorf("core: %w: %d bytes, limit %d", ErrTooLarge, len(core), maxCoreSize)
	}
	return core, nil
}

// DecodeCore parses a signed core, refusing anything that is not exactly
// the canonical encoding of a valid receipt.
func DecodeCore(b []byte) (Receipt, error) {
	if len(b) > maxCoreSize {
		return Receipt{}, fmt.Errorf("core: %w: %d bytes, limit %d", ErrTooLarge, len(b), maxCoreSize)
	}
	var w wireReceipt
	if err := decMode.Unmarshal(b, &w); err != nil {
		return Receipt{}, fmt.Errorf("core: %w: %v", ErrMalformed, err)
	}
	r, err := w.receipt()
	if err != nil {
		return Receipt{}, fmt.Errorf("core: %w", err)
	}
	if err := checkCanonical(b, &w); err != nil {
		return Receipt{}, fmt.Errorf("core: %w", err)
	}
	return r, nil
}

// MarshalJSON writes the receipt as a JSON object with the §6.1 keys and
// the same values as the signed core (numbers for the uints, 0|1 for
// fidelity_met, hex for ids). It is the form an OpenAI response's
// usage.energy carries; the envelope, not this, is what verifies.
func (r Receipt) MarshalJSON() ([]byte, error) {
	if _, err := r.Core(); err != nil { // only what could be sealed
		return nil, err
	}
	return json.Marshal(r.wire())
}

// UnmarshalJSON reads the JSON form, with the same checks as DecodeCore
// except canonical byte form, which JSON has none of.
func (r *Receipt) UnmarshalJSON(b []byte) error {
	var w wireReceipt
	if err := strictJSON(b, &w); err != nil {
		return fmt.Errorf("receipt json: %w: %v", ErrMalformed, err)
	}
	v, err := w.receipt()
	if err != nil {
		return fmt.Errorf("receipt json: %w", err)
	}
	// JSON's bound is looser than the core's: a receipt whose core would
	// be over it is not one a steward sealed.
	if _, err := v.Core(); err != nil {
		return fmt.Errorf("receipt json: %w", err)
	}
	*r = v
	return nil
}
