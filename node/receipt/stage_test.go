package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/hw"
)

// splitReceipt is a valid generation receipt of steward 1 whose model ran
// in stages on ranges [0,2) (steward 1), [2,3) (node 2) and [3,4) (node 3),
// with parts graded as given; its energy is their total.
func splitReceipt(t testing.TB, parts ...hw.Energy) (Receipt, []*Sealer) {
	t.Helper()
	head := testSealer(t, 1)
	r := generation(t, head)
	r.Weights = &Weights{Digest: Sum([]byte("weights")), Precision: "q8_0"}
	sealers := []*Sealer{head, testSealer(t, 2), testSealer(t, 3)}
	ranges := [][2]uint32{{0, 2}, {2, 3}, {3, 4}}
	for i, e := range parts {
		s, err := sealers[i].SignStageReport(StageReport{RequestID: r.RequestID, Weights: r.Weights.Digest,
			Lo: ranges[i][0], Hi: ranges[i][1], Tokens: 6, Energy: e})
		if err != nil {
			t.Fatal(err)
		}
		r.Stages = append(r.Stages, s)
	}
	total, err := SumEnergy(parts...)
	if err != nil {
		t.Fatal(err)
	}
	r.Energy = total
	return r, sealers
}

func u64(v uint64) *uint64 { return &v }

func TestSumEnergy(t *testing.T) {
	cases := []struct {
		name  string
		parts []hw.Energy
		want  hw.Energy
	}{
		{"all hardware", []hw.Energy{hw.Measured(100, 90), hw.Measured(50, 60)}, hw.Measured(150, 150)},
		{"one shared", []hw.Energy{hw.Measured(100, 90), hw.Modelled(60, u64(50))}, hw.Modelled(150, u64(150))},
		{"one modelled unmeasured", []hw.Energy{hw.Measured(100, 90), hw.Modelled(60, nil)}, hw.Modelled(150, nil)},
		{"one estimate", []hw.Energy{hw.Measured(100, 90), hw.Estimated(70), hw.Measured(5, 5)}, hw.Estimated(165)},
	}
	for _, c := range cases {
		got, err := SumEnergy(c.parts...)
		if err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if _, err := SumEnergy(hw.Estimated(1<<63), hw.Estimated(1<<63)); !errors.Is(err, ErrStageTotal) {
		t.Errorf("overflow: %v", err)
	}
}

func TestStageReportRoundTrip(t *testing.T) {
	s := testSealer(t, 2)
	rep := StageReport{RequestID: Sum([]byte("req")), Weights: Sum([]byte("w")), Lo: 3, Hi: 7, Tokens: 11, Energy: hw.Measured(12, 13)}
	signed, err := s.SignStageReport(rep)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenStageReport(signed.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	rep.Node = s.DID()
	if got.StageReport != rep || !got.SignedBy(s.Public()) || got.SignedBy(testSealer(t, 3).Public()) {
		t.Fatalf("opened %+v, want %+v", got.StageReport, rep)
	}
	if _, err := s.SignStageReport(StageReport{Lo: 2, Hi: 2, Energy: hw.Estimated(1)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty range signed: %v", err)
	}
	if _, err := s.SignStageReport(StageReport{Lo: 0, Hi: 2, Node: testSealer(t, 3).DID()}); !errors.Is(err, ErrStageSigner) {
		t.Errorf("another node's report signed: %v", err)
	}
	// Every byte of the envelope matters.
	for i := range signed.Envelope {
		b := bytes.Clone(signed.Envelope)
		b[i] ^= 0x01
		if _, err := OpenStageReport(b); err == nil {
			t.Fatalf("byte %d flipped: opened", i)
		}
	}
}

func TestSplitReceiptVerifies(t *testing.T) {
	r, sealers := splitReceipt(t, hw.Measured(700, 650), hw.Modelled(300, u64(280)), hw.Measured(90, 100))
	sealed, err := sealers[0].Seal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Open(sealed.Envelope, sealers[0].Public())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Receipt.Stages) != 3 || got.Receipt.Energy != hw.Modelled(1050, u64(1070)) {
		t.Fatalf("opened %d stages, energy %v", len(got.Receipt.Stages), got.Receipt.Energy)
	}
	for i, s := range got.Receipt.Stages {
		if !s.SignedBy(sealers[i].Public()) || s.StageReport != r.Stages[i].StageReport {
			t.Errorf("stage %d: %+v", i, s.StageReport)
		}
	}
	// The JSON form carries the same reports and reads back.
	j, err := json.Marshal(got.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	var back Receipt
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Stages) != 3 || back.Energy != got.Receipt.Energy {
		t.Fatalf("json round trip: %d stages", len(back.Stages))
	}
	// A receipt that was not split has no stages key at all.
	plain := generation(t, sealers[0])
	core, err := plain.Core()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(core, []byte("stages")) {
		t.Fatal("a whole serve's core names stages")
	}
}

// encodeUnchecked encodes r's wire form without Validate, as a forger
// would.
func encodeUnchecked(t *testing.T, r *Receipt) []byte {
	t.Helper()
	w := r.wire()
	b, err := encMode.Marshal(&w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSplitReceiptRefused(t *testing.T) {
	parts := []hw.Energy{hw.Measured(700, 650), hw.Measured(300, 280)}
	cases := []struct {
		name  string
		edit  func(r *Receipt, sealers []*Sealer)
		want  error
		index int
	}{
		{"tampered report", func(r *Receipt, _ []*Sealer) {
			env := bytes.Clone(r.Stages[1].Envelope)
			i := bytes.Index(env, []byte("layer_hi")) + len("layer_hi")
			env[i]++ // layer_hi 3 → 4, under the old signature
			r.Stages[1].Envelope = env
		}, ErrSignature, 1},
		{"wrong signer", func(r *Receipt, sealers []*Sealer) {
			rep := r.Stages[1].StageReport
			rep.Node = sealers[2].DID() // names node 3, signed by node 2
			core, err := rep.Core()
			if err != nil {
				t.Fatal(err)
			}
			env, err := sealers[1].SealPayload(core)
			if err != nil {
				t.Fatal(err)
			}
			r.Stages[1] = SignedStageReport{StageReport: rep, Envelope: env}
		}, ErrStageSigner, 1},
		{"head's part signed by another", func(r *Receipt, sealers []*Sealer) {
			rep := r.Stages[0].StageReport
			rep.Node = ""
			s, err := sealers[2].SignStageReport(rep)
			if err != nil {
				t.Fatal(err)
			}
			r.Stages[0] = s
		}, ErrStageSigner, 0},
		{"missing range", func(r *Receipt, sealers []*Sealer) {
			rep := r.Stages[1].StageReport
			rep.Lo = 3 // layer 2 is nobody's
			rep.Hi = 4
			s, err := sealers[1].SignStageReport(rep)
			if err != nil {
				t.Fatal(err)
			}
			r.Stages[1] = s
		}, ErrStageRange, 1},
		{"another request", func(r *Receipt, sealers []*Sealer) {
			rep := r.Stages[1].StageReport
			rep.RequestID = Sum([]byte("another"))
			s, err := sealers[1].SignStageReport(rep)
			if err != nil {
				t.Fatal(err)
			}
			r.Stages[1] = s
		}, ErrStageMismatch, 1},
		{"total does not add up", func(r *Receipt, _ []*Sealer) {
			r.Energy = hw.Measured(1001, 930)
		}, ErrStageTotal, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, sealers := splitReceipt(t, parts...)
			c.edit(&r, sealers)
			if _, err := r.Core(); !errors.Is(err, c.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Core: %v, want %v", err, c.want)
			}
			if _, err := sealers[0].Seal(r); !errors.Is(err, c.want) {
				t.Fatalf("Seal: %v, want %v", err, c.want)
			}
			// A forger's core is refused by the decoder with the same
			// error, naming the report.
			_, err := DecodeCore(encodeUnchecked(t, &r))
			var se *StageError
			if !errors.Is(err, c.want) || !errors.As(err, &se) || se.Index != c.index {
				t.Fatalf("DecodeCore: %v, want %v at %d", err, c.want, c.index)
			}
		})
	}
	// A total graded HwShunt over a part that is an estimate is refused.
	r, _ := splitReceipt(t, hw.Measured(700, 650), hw.Estimated(300))
	r.Energy = hw.Measured(1000, 950)
	if _, err := DecodeCore(encodeUnchecked(t, &r)); !errors.Is(err, ErrStageTotal) {
		t.Fatalf("overclaimed provenance: %v", err)
	}
	// One stage is not a split.
	r, _ = splitReceipt(t, hw.Measured(700, 650))
	if _, err := r.Core(); !errors.Is(err, ErrStageRange) {
		t.Fatalf("one stage: %v", err)
	}
}

// FuzzOpenStageReport: whatever opens re-encodes to the very core its
// envelope signs, and its envelope is the bytes given.
func FuzzOpenStageReport(f *testing.F) {
	r, _ := splitReceipt(f, hw.Measured(700, 650), hw.Modelled(300, nil), hw.Estimated(9))
	for _, s := range r.Stages {
		f.Add(s.Envelope)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := OpenStageReport(b)
		if err != nil {
			return
		}
		payload, _, err := OpenPayload(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Core()
		if err != nil || !bytes.Equal(again, payload) || !bytes.Equal(s.Envelope, b) {
			t.Fatalf("opened report does not re-encode: %v", err)
		}
	})
}
