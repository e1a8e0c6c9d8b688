package conformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
	"github.com/zeebo/blake3"
)

// The v1 reference serve. Every input is fixed here and recorded in
// meta.json, so another implementation can run the same serve and must
// produce the same signed core byte for byte.
const (
	// PromptText is the reference prompt. Its token ids are its UTF-8
	// bytes (the reference engine has no tokenizer), and its prompt_hash
	// is BLAKE3-256 of those bytes.
	PromptText = "How many joules does one token cost?"
	// referenceEnergyUJ is what the reference meter reports for the span:
	// an Estimator figure, since the vector's meter reads no hardware.
	referenceEnergyUJ = 3_744
)

// seedContext and nonceContext derive the fixed steward seed and receipt
// nonce (BLAKE3 derive_key over nothing), so the vector's key is not a
// hand-picked pattern.
const (
	seedContext  = "meshnode conformance v1 steward seed"
	nonceContext = "meshnode conformance v1 receipt nonce"
)

// ReferenceBackends are the v1 reference backends, in registration order:
// one below the floor, one over the ceiling, one admissible.
func ReferenceBackends() []steward.Backend {
	return []steward.Backend{
		{Name: "ref-small", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F1, UJPerToken: 2})},
		{Name: "ref-large", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F4, UJPerToken: 30})},
		{Name: "ref-mid", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F3, UJPerToken: 9})},
	}
}

// ReferencePrompt is PromptText as token ids.
func ReferencePrompt() []uint32 {
	ids := make([]uint32, len(PromptText))
	for i := range len(PromptText) {
		ids[i] = uint32(PromptText[i])
	}
	return ids
}

// ReferenceRequest is the v1 reference request: F2 floor, 1000 µJ ceiling,
// 16 output tokens.
func ReferenceRequest() receipt.ServeRequest {
	return receipt.ServeRequest{
		PromptHash:     receipt.PromptHash([]byte(PromptText)),
		PromptTokens:   uint32(len(PromptText)),
		MaxTokens:      16,
		FidelityFloor:  receipt.F2,
		JouleCeilingUJ: 1_000,
	}
}

// ReferenceSeed is the steward's Ed25519 seed.
func ReferenceSeed() []byte {
	seed := make([]byte, 32)
	blake3.DeriveKey(seedContext, nil, seed)
	return seed
}

func referenceNonce() receipt.Nonce {
	var full [32]byte
	blake3.DeriveKey(nonceContext, nil, full[:])
	return receipt.Nonce(full[:16])
}

// fixedMeter reports one fixed figure for every span.
type fixedMeter struct{ e hw.Energy }

func (m fixedMeter) Open() (hw.Span, error)   { return fixedSpan(m), nil }
func (m fixedMeter) MinWindow() time.Duration { return 0 }
func (m fixedMeter) Name() string             { return "conformance-fixed" }

type fixedSpan fixedMeter

func (s fixedSpan) Close() (hw.Energy, error) { return s.e, nil }

// fixedReader yields one nonce, then fails: the reference serve seals
// exactly one receipt.
type fixedReader struct {
	n    receipt.Nonce
	used bool
}

func (r *fixedReader) Read(p []byte) (int, error) {
	if r.used || len(p) != len(r.n) {
		return 0, fmt.Errorf("conformance: the reference nonce is for one %d-byte read", len(r.n))
	}
	r.used = true
	return copy(p, r.n[:]), nil
}

// Vectors are the v1 conformance files.
type Vectors struct {
	SignedCore []byte
	Envelope   []byte
	Meta       Meta
}

// Meta is meta.json: every input of the reference serve, its outcome, and
// the ids an implementation must reproduce.
type Meta struct {
	Profile   string `json:"profile"`
	Generator string `json:"generator"`
	Steward   struct {
		SeedHex      string `json:"seed_hex"`
		PublicKeyHex string `json:"public_key_hex"`
		DID          string `json:"did"`
	} `json:"steward"`
	Backends []MetaBackend `json:"backends"`
	Request  struct {
		receipt.ServeRequest
		CanonicalHex string `json:"canonical_hex"`
	} `json:"request"`
	Prompt struct {
		Text     string   `json:"text"`
		TokenIDs []uint32 `json:"token_ids"`
	} `json:"prompt"`
	Meter struct {
		Provenance  string `json:"provenance"`
		EstimatedUJ uint64 `json:"estimated_uj"`
	} `json:"meter"`
	NonceHex string        `json:"nonce_hex"`
	Route    steward.Route `json:"route"`
	Outcome  struct {
		OutputTokenIDs []uint32 `json:"output_token_ids"`
		TokensIn       uint32   `json:"tokens_in"`
		TokensOut      uint32   `json:"tokens_out"`
		TokensAccepted uint32   `json:"tokens_accepted"`
		Delivered      uint8    `json:"delivered_fidelity"`
	} `json:"outcome"`
	Expected struct {
		RequestID          string `json:"request_id"`
		PromptPayload      string `json:"prompt_payload"`
		Opening            string `json:"opening"`
		OutputCommitment   string `json:"output_commitment"`
		UJPerAcceptedToken uint64 `json:"uj_per_accepted_token"`
		SignedCoreID       string `json:"signed_core_id"`
		EnvelopeID         string `json:"envelope_id"`
	} `json:"expected"`
	Receipt receipt.Receipt `json:"receipt"`
}

// MetaBackend is one reference backend as meta.json lists it.
type MetaBackend struct {
	Name              string           `json:"name"`
	Recipe            string           `json:"recipe"`
	Fidelity          receipt.Fidelity `json:"fidelity"`
	UJPerToken        uint64           `json:"uj_per_token"`
	UJPerOptionScored uint64           `json:"uj_per_option_scored"`
}

// ReferenceV1 runs the v1 reference serve through a real steward and
// returns its vectors.
func ReferenceV1() (*Vectors, error) {
	key, err := identity.KeyFromSeed(ReferenceSeed())
	if err != nil {
		return nil, err
	}
	energy := hw.Estimated(referenceEnergyUJ)
	backends := ReferenceBackends()
	st, err := steward.New(steward.Config{
		Key:      key,
		Meter:    fixedMeter{energy},
		Backends: backends,
		Rand:     &fixedReader{n: referenceNonce()},
	})
	if err != nil {
		return nil, err
	}
	req, prompt := ReferenceRequest(), ReferencePrompt()
	served, err := st.Serve(context.Background(), req, prompt, nil)
	if err != nil {
		return nil, fmt.Errorf("conformance: reference serve: %w", err)
	}
	sealed := served.Receipt
	r := sealed.Receipt
	disclosure, err := st.Disclose(&r, prompt, served.Output)
	if err != nil {
		return nil, err
	}
	canonical, err := req.Canonical()
	if err != nil {
		return nil, err
	}

	v := &Vectors{SignedCore: sealed.Core, Envelope: sealed.Envelope}
	m := &v.Meta
	m.Profile = receipt.Profile
	m.Generator = "go run ./conformance/cmd/gen-vectors conformance/v1"
	m.Steward.SeedHex = hex.EncodeToString(ReferenceSeed())
	m.Steward.PublicKeyHex = hex.EncodeToString(key.Public())
	m.Steward.DID = st.DID()
	for _, b := range backends {
		m.Backends = append(m.Backends, MetaBackend{
			Name: b.Name, Recipe: b.Engine.Recipe(), Fidelity: b.Engine.Fidelity(),
			UJPerToken: b.Engine.UJPerToken(), UJPerOptionScored: b.Engine.UJPerOptionScored(),
		})
	}
	m.Request.ServeRequest = req
	m.Request.CanonicalHex = hex.EncodeToString(canonical)
	m.Prompt.Text, m.Prompt.TokenIDs = PromptText, prompt
	m.Meter.Provenance, m.Meter.EstimatedUJ = energy.Provenance().String(), energy.EstimatedUJ()
	m.NonceHex = r.Nonce.String()
	m.Route = served.Route
	m.Outcome.OutputTokenIDs = served.Output
	m.Outcome.TokensIn, m.Outcome.TokensOut, m.Outcome.TokensAccepted = served.Outcome.TokensIn, served.Outcome.TokensOut, served.Outcome.TokensAccepted
	m.Outcome.Delivered = uint8(*served.Outcome.Delivered)
	m.Expected.RequestID = r.RequestID.String()
	m.Expected.PromptPayload = disclosure.Payload.String()
	m.Expected.Opening = disclosure.Opening.String()
	m.Expected.OutputCommitment = r.OutputCommitment.String()
	m.Expected.UJPerAcceptedToken, _ = r.UJPerAcceptedToken()
	m.Expected.SignedCoreID = receipt.Sum(sealed.Core).String()
	m.Expected.EnvelopeID = sealed.ID.String()
	m.Receipt = r
	return v, nil
}

// File names inside a vectors directory.
const (
	SignedCoreFile = "reference/signed_core.hex"
	EnvelopeFile   = "reference/envelope.hex"
	MetaFile       = "meta.json"
)

// Files returns the vectors' files, by path relative to the vectors
// directory: lowercase hex with a final newline, and indented JSON.
func (v *Vectors) Files() (map[string][]byte, error) {
	var meta bytes.Buffer
	enc := json.NewEncoder(&meta)
	enc.SetEscapeHTML(false) // the route line's "<=" stays readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(&v.Meta); err != nil {
		return nil, err
	}
	return map[string][]byte{
		SignedCoreFile: []byte(hex.EncodeToString(v.SignedCore) + "\n"),
		EnvelopeFile:   []byte(hex.EncodeToString(v.Envelope) + "\n"),
		MetaFile:       meta.Bytes(),
	}, nil
}

// WriteDir writes the vectors under dir.
func (v *Vectors) WriteDir(dir string) error {
	files, err := v.Files()
	if err != nil {
		return err
	}
	for name, b := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
