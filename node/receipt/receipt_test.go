package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/meshnode/meshnode/hw"
)

// keysOf returns the sorted key set of a CBOR map.
func keysOf(t testing.TB, b []byte) []string {
	t.Helper()
	m := genericMap(t, b)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// alwaysKeys are the §6.1 keys every receipt carries.
var alwaysKeys = []string{
	"backend", "cache_hit_tokens", "energy_provenance", "estimated_uj", "fidelity_floor", "fidelity_met",
	"mesh_receipt", "nonce", "recipe", "request_id", "route", "sequence", "spec_accepted", "spec_proposed",
	"steward", "tokens_accepted", "tokens_in", "tokens_out",
}

func TestCoreKeys(t *testing.T) {
	s := testSealer(t, 1)
	m := uint64(1234)
	prev := Sum([]byte("previous envelope"))
	grant := Sum([]byte("grant"))
	tests := []struct {
		name  string
		build func() Receipt
		extra []string
	}{
		{"estimator generation", func() Receipt { return generation(t, s) },
			[]string{"fidelity_advertised", "fidelity_delivered", "output_commitment", "uj_per_accepted_token"}},
		{"no delivered fidelity", func() Receipt { r := generation(t, s); r.Fidelity = nil; return r },
			[]string{"output_commitment", "uj_per_accepted_token"}},
		{"no accepted tokens", func() Receipt { r := generation(t, s); r.TokensAccepted = 0; return r },
			[]string{"fidelity_advertised", "fidelity_delivered", "output_commitment"}},
		{"hwshunt", func() Receipt { r := generation(t, s); r.Energy = hw.Measured(m, 900); return r },
			[]string{"fidelity_advertised", "fidelity_delivered", "measured_uj", "output_commitment", "uj_per_accepted_token"}},
		{"modelbased without measurement", func() Receipt { r := generation(t, s); r.Energy = hw.Modelled(900, nil); return r },
			[]string{"fidelity_advertised", "fidelity_delivered", "output_commitment", "uj_per_accepted_token"}},
		{"chained and granted", func() Receipt {
			r := generation(t, s)
			r.Sequence, r.Prev, r.GrantID, r.GrantBreach = 4, &prev, &grant, "caveat-unsatisfied"
			return r
		}, []string{"fidelity_advertised", "fidelity_delivered", "grant_breach", "grant_id", "output_commitment", "prev", "uj_per_accepted_token"}},
		{"decision", func() Receipt { return decision(t, s) },
			[]string{"measured_uj", "options_scored", "precision", "questions_answered", "schema_tokens", "training_authority",
				"training_digest", "uj_per_decision", "uj_per_option_scored", "weights_digest"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.build()
			b, err := r.Core()
			if err != nil {
				t.Fatal(err)
			}
			want := append(slices.Clone(alwaysKeys), tt.extra...)
			slices.Sort(want)
			if got := keysOf(t, b); !slices.Equal(got, want) {
				t.Fatalf("keys\n got %v\nwant %v", got, want)
			}
			if !slices.Equal(b, canonicalOf(t, genericMap(t, b))) {
				t.Fatal("core is not what an independent core-deterministic encoder writes")
			}
			assertNoFloatsBoolsNulls(t, b)
			back, err := DecodeCore(b)
			if err != nil {
				t.Fatalf("DecodeCore: %v", err)
			}
			if !reflect.DeepEqual(back, r) {
				t.Fatalf("round trip\n got %+v\nwant %+v", back, r)
			}
		})
	}
}

// assertNoFloatsBoolsNulls walks the raw CBOR data items of a core.
func assertNoFloatsBoolsNulls(t *testing.T, b []byte) {
	t.Helper()
	var m map[string]cbor.RawMessage
	if err := cbor.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if v[0]>>5 == 7 { // major type 7: floats, false, true, null, undefined
			t.Errorf("key %s holds a simple value or float %x", k, []byte(v))
		}
	}
}

func TestDerivedFigures(t *testing.T) {
	s := testSealer(t, 1)
	r := generation(t, s) // 1000 µJ over 3 accepted tokens
	b, err := r.Core()
	if err != nil {
		t.Fatal(err)
	}
	if got := genericMap(t, b)["uj_per_accepted_token"]; got != uint64(333) {
		t.Fatalf("uj_per_accepted_token = %v, want 333 (floor of 1000/3)", got)
	}
	d := decision(t, s) // measured 901 µJ; 2 questions, 7 options
	b, err = d.Core()
	if err != nil {
		t.Fatal(err)
	}
	m := genericMap(t, b)
	if m["uj_per_decision"] != uint64(450) || m["uj_per_option_scored"] != uint64(128) {
		t.Fatalf("uj_per_decision %v, uj_per_option_scored %v; want 450 and 128 from the measured 901 µJ", m["uj_per_decision"], m["uj_per_option_scored"])
	}
}

// TestReceiptValidate: a receipt that breaks a rule cannot be encoded,
// sealed or written as JSON.
func TestReceiptValidate(t *testing.T) {
	s := testSealer(t, 1)
	prev := Sum([]byte("p"))
	tests := []struct {
		name string
		mod  func(*Receipt)
	}{
		{"empty backend", func(r *Receipt) { r.Backend = "" }},
		{"empty recipe", func(r *Receipt) { r.Recipe = "" }},
		{"empty route", func(r *Receipt) { r.Route = "" }},
		{"floor above F4", func(r *Receipt) { r.FidelityFloor = 7 }},
		{"delivered above advertised", func(r *Receipt) { r.Fidelity = &FidelityReport{Advertised: F2, Delivered: F3} }},
		{"fidelity_met contradicts delivered", func(r *Receipt) { r.Fidelity = &FidelityReport{Advertised: F3, Delivered: F1} }},
		{"weights without precision", func(r *Receipt) { r.Weights = &Weights{Digest: prev} }},
		{"unknown training authority", func(r *Receipt) { r.Training = &Training{Digest: prev, Authority: "trusted"} }},
		{"decision with output commitment", func(r *Receipt) { r.Decision = &DecisionFigures{QuestionsAnswered: 1, OptionsScored: 2} }},
		{"decision without questions", func(r *Receipt) {
			r.OutputCommitment = nil
			r.Decision = &DecisionFigures{OptionsScored: 2}
		}},
		{"breach without grant", func(r *Receipt) { r.GrantBreach = "caveat-unsatisfied" }},
		{"prev at genesis", func(r *Receipt) { r.Prev = &prev }},
		{"no prev past genesis", func(r *Receipt) { r.Sequence = 3 }},
		{"steward not a did:key", func(r *Receipt) { r.Steward = "did:web:example.org" }},
		// Text the strict decoder refuses is never sealed.
		{"backend not UTF-8", func(r *Receipt) { r.Backend = "cpu:caf\xe9" }},
		{"recipe not UTF-8", func(r *Receipt) { r.Recipe = "\xff" }},
		{"route not UTF-8", func(r *Receipt) { r.Route += "\xc3" }},
		{"precision not UTF-8", func(r *Receipt) { r.Weights = &Weights{Digest: prev, Precision: "fp\x80"} }},
		{"breach not UTF-8", func(r *Receipt) { r.GrantID, r.GrantBreach = &prev, "\xfe" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := generation(t, s)
			tt.mod(&r)
			if _, err := r.Core(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Core error = %v, want ErrInvalid", err)
			}
			if _, err := s.Seal(r); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Seal error = %v, want ErrInvalid", err)
			}
			if _, err := json.Marshal(r); !errors.Is(err, ErrInvalid) {
				t.Fatalf("MarshalJSON error = %v, want ErrInvalid", err)
			}
		})
	}
}

// TestCoreBound: the encoder and the decoder agree at the size bound. A
// core Core writes, DecodeCore reads back; a receipt whose core would be
// over the bound is refused at sealing, not handed out unverifiable.
func TestCoreBound(t *testing.T) {
	s := testSealer(t, 1)
	r := generation(t, s)
	r.Route = "r"
	base, err := r.Core()
	if err != nil {
		t.Fatal(err)
	}
	fits, over := 0, 0
	for n := maxCoreSize - len(base) - 2; n <= maxCoreSize-len(base)+4; n++ {
		r.Route = strings.Repeat("r", n)
		core, err := r.Core()
		switch {
		case err == nil:
			fits++
			if got, err := DecodeCore(core); err != nil || got.Route != r.Route {
				t.Fatalf("route of %d bytes: a %d-byte core Core wrote does not decode: %v", n, len(core), err)
			}
		case errors.Is(err, ErrTooLarge):
			over++
			if _, err := s.Seal(r); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("route of %d bytes: sealed: %v", n, err)
			}
			if _, err := json.Marshal(r); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("route of %d bytes: written as JSON: %v", n, err)
			}
			j, _ := json.Marshal(r.wire())
			if err := json.Unmarshal(j, new(Receipt)); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("route of %d bytes: read from JSON: %v", n, err)
			}
		default:
			t.Fatal(err)
		}
	}
	if fits == 0 || over == 0 {
		t.Fatalf("%d fit, %d over: the bound was not crossed", fits, over)
	}
}

// TestDecodeCoreRefuses edits a valid core key by key and re-encodes it
// canonically, so each case isolates one rule.
func TestDecodeCoreRefuses(t *testing.T) {
	s := testSealer(t, 1)
	gen := generation(t, s)
	genCore, err := gen.Core()
	if err != nil {
		t.Fatal(err)
	}
	dec := decision(t, s)
	decCore, err := dec.Core()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(core []byte, kv ...any) func() []byte {
		return func() []byte {
			m := genericMap(t, core)
			for i := 0; i < len(kv); i += 2 {
				if kv[i+1] == nil {
					delete(m, kv[i].(string))
				} else {
					m[kv[i].(string)] = kv[i+1]
				}
			}
			return canonicalOf(t, m)
		}
	}
	tests := []struct {
		name string
		raw  func() []byte
		want error
	}{
		{"HwShunt without measured_uj", edit(genCore, "energy_provenance", "HwShunt"), hw.ErrCoupling},
		{"Estimator with measured_uj", edit(genCore, "measured_uj", uint64(5)), hw.ErrCoupling},
		{"unknown provenance", edit(genCore, "energy_provenance", "Guess"), ErrInvalid},
		{"wrong uj_per_accepted_token", edit(genCore, "uj_per_accepted_token", uint64(334)), ErrInvalid},
		{"missing uj_per_accepted_token", edit(genCore, "uj_per_accepted_token", nil), ErrInvalid},
		{"uj_per_accepted_token with no accepted tokens", edit(genCore, "tokens_accepted", uint64(0)), ErrInvalid},
		{"advertised without delivered", edit(genCore, "fidelity_delivered", nil), ErrInvalid},
		{"delivered above advertised", edit(genCore, "fidelity_delivered", uint64(4)), ErrInvalid},
		{"fidelity_met 2", edit(genCore, "fidelity_met", uint64(2)), ErrInvalid},
		{"fidelity_met 0 against delivered", edit(genCore, "fidelity_met", uint64(0)), ErrInvalid},
		{"fidelity 300", edit(genCore, "fidelity_floor", uint64(300)), ErrMalformed},
		{"profile mesh/2", edit(genCore, "mesh_receipt", "mesh/2"), ErrInvalid},
		{"unknown key", edit(genCore, "colour", "blue"), ErrMalformed},
		{"float energy", edit(genCore, "estimated_uj", 1000.0), ErrMalformed},
		{"boolean fidelity_met", edit(genCore, "fidelity_met", true), ErrMalformed},
		{"null prev at genesis", edit(genCore, "prev", cbor.RawMessage{0xf6}), ErrNonCanonical},
		{"missing tokens_in", edit(genCore, "tokens_in", nil), ErrNonCanonical},
		{"missing backend", edit(genCore, "backend", nil), ErrInvalid},
		{"upper-case request_id", edit(genCore, "request_id", strings.ToUpper(gen.RequestID.String())), ErrMalformed},
		{"short nonce", edit(genCore, "nonce", "0102"), ErrMalformed},
		{"prev at genesis", edit(genCore, "prev", gen.RequestID.String()), ErrInvalid},
		{"sequence without prev", edit(genCore, "sequence", uint64(1)), ErrInvalid},
		{"steward not did:key", edit(genCore, "steward", "did:key:zQ3s"), ErrMalformed},
		{"weights_digest alone", edit(decCore, "precision", nil), ErrInvalid},
		{"training_digest alone", edit(decCore, "training_authority", nil), ErrInvalid},
		{"partial decision keys", edit(decCore, "uj_per_option_scored", nil), ErrInvalid},
		{"wrong uj_per_decision", edit(decCore, "uj_per_decision", uint64(1)), ErrInvalid},
		{"decision with output commitment", edit(decCore, "output_commitment", gen.RequestID.String()), ErrInvalid},
		{"unsorted keys", func() []byte {
			em, _ := cbor.EncOptions{Sort: cbor.SortNone}.EncMode()
			w := gen.wire()
			b, _ := em.Marshal(&w) // struct declaration order, not canonical
			return b
		}, ErrNonCanonical},
		{"trailing byte", func() []byte { return append(slices.Clone(genCore), 0) }, ErrMalformed},
		{"too large", func() []byte { return make([]byte, maxCoreSize+1) }, ErrTooLarge},
		{"tagged", func() []byte { return append([]byte{0xd8, 0x18}, genCore...) }, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeCore(tt.raw()); !errors.Is(err, tt.want) {
				t.Fatalf("DecodeCore error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestReceiptJSON(t *testing.T) {
	s := testSealer(t, 1)
	for _, r := range []Receipt{generation(t, s), decision(t, s)} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		// Same keys as the core.
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		core, _ := r.Core()
		jsonKeys := make([]string, 0, len(m))
		for k := range m {
			jsonKeys = append(jsonKeys, k)
		}
		slices.Sort(jsonKeys)
		if want := keysOf(t, core); !slices.Equal(jsonKeys, want) {
			t.Fatalf("JSON keys %v, core keys %v", jsonKeys, want)
		}
		var back Receipt
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("JSON round trip\n got %+v\nwant %+v", back, r)
		}
	}
	good, _ := json.Marshal(generation(t, s))
	tests := []struct {
		name string
		raw  string
		want error
	}{
		{"coupling", strings.Replace(string(good), `"Estimator"`, `"HwShunt"`, 1), hw.ErrCoupling},
		{"unknown key", strings.Replace(string(good), `{`, `{"colour":"blue",`, 1), ErrMalformed},
		{"trailing data", string(good) + "{}", ErrMalformed},
		{"derived figure", strings.Replace(string(good), `"uj_per_accepted_token":333`, `"uj_per_accepted_token":334`, 1), ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Receipt
			if err := r.UnmarshalJSON([]byte(tt.raw)); !errors.Is(err, tt.want) {
				t.Fatalf("UnmarshalJSON error = %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzDecodeCore(f *testing.F) {
	s := testSealer(f, 1)
	cut := generation(f, s)
	cut.CutShort = CutCeiling
	split, _ := splitReceipt(f, hw.Measured(700, 650), hw.Estimated(300))
	for _, r := range []Receipt{generation(f, s), decision(f, s), cut, split} {
		b, err := r.Core()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeCore(b)
		if err != nil {
			return
		}
		again, err := r.Core()
		if err != nil {
			t.Fatalf("decoded core does not re-encode: %v", err)
		}
		if string(again) != string(b) {
			t.Fatalf("decoded %x, re-encoded %x", b, again)
		}
	})
}

func FuzzReceiptJSON(f *testing.F) {
	s := testSealer(f, 1)
	for _, r := range []Receipt{generation(f, s), decision(f, s)} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Receipt
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		core, err := r.Core()
		if err != nil {
			t.Fatalf("a receipt accepted from JSON cannot be encoded: %v", err)
		}
		// And the core it encodes to is one the decoder reads back.
		back, err := DecodeCore(core)
		if err != nil {
			t.Fatalf("a receipt accepted from JSON encodes to a core DecodeCore refuses: %v", err)
		}
		if again, _ := back.Core(); !bytes.Equal(again, core) {
			t.Fatal("the decoded core re-encodes differently")
		}
	})
}

// TestEnergyCouplingAtSeal: every figure hw.NewEnergy admits seals and
// opens unchanged; every one it refuses cannot exist, so no receipt can
// carry it (§3.3: an unsealable receipt cannot be built).
func TestEnergyCouplingAtSeal(t *testing.T) {
	s := testSealer(t, 1)
	m := uint64(700)
	for _, p := range []hw.Provenance{hw.Estimator, hw.ModelBased, hw.HwShunt} {
		for _, measured := range []*uint64{nil, &m} {
			e, err := hw.NewEnergy(p, measured, 600)
			wantOK := !(p == hw.HwShunt && measured == nil) && !(p == hw.Estimator && measured != nil)
			if (err == nil) != wantOK {
				t.Fatalf("NewEnergy(%v, measured %v) error %v", p, measured != nil, err)
			}
			if err != nil {
				if !errors.Is(err, hw.ErrCoupling) {
					t.Fatalf("NewEnergy error %v, want ErrCoupling", err)
				}
				continue
			}
			r := generation(t, s)
			r.Energy = e
			sealed, err := s.Seal(r)
			if err != nil {
				t.Fatal(err)
			}
			opened, err := Open(sealed.Envelope, nil)
			if err != nil || opened.Receipt.Energy != e {
				t.Fatalf("%v: opened energy %v, %v", e, opened.Receipt.Energy, err)
			}
		}
	}
}
