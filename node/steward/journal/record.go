package journal

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/receipt"
)

// MaxLine bounds one record's line: an authorisation carrying the longest
// presentation fits with room to spare.
const MaxLine = 128 << 10

// maxEnvelope bounds a change entry's envelope.
const maxEnvelope = 32 << 10

// Record is one journal record.
type Record struct {
	Seq uint64
	// Prev is the hash of the previous record's line; nil for seq 0.
	Prev  *receipt.ContentID
	Entry Entry
	// Hash is BLAKE3-256 of this record's line (without its newline), the
	// next record's prev.
	Hash receipt.ContentID
}

// Entry is what a record holds: exactly one field is set.
type Entry struct {
	Authorised *Authorised `json:"authorised,omitempty"`
	Debited    *Debited    `json:"debited,omitempty"`
	Sealed     *Sealed     `json:"sealed,omitempty"`
	Change     *Change     `json:"change,omitempty"`
	Witnessed  *Witnessed  `json:"witnessed,omitempty"`
	Revoked    *Revoked    `json:"revoked,omitempty"`
}

// Authorised is a grant decided for a serve, written before the engine
// runs (§2.2): the presentation as the caller sent it, the request, the
// backend and the weights it named, and the decision time.
type Authorised struct {
	Presentation json.RawMessage      `json:"presentation"`
	Request      receipt.ServeRequest `json:"request"`
	Backend      string               `json:"backend"`
	Recipe       string               `json:"recipe"`
	// Model is the content address of the weights the backend named; nil
	// when it named none. Precision goes with it.
	Model     *receipt.ContentID `json:"model,omitempty"`
	Precision string             `json:"precision,omitempty"`
	// At is the decision time in Unix nanoseconds.
	At int64 `json:"at"`
}

// Time returns the decision time.
func (a *Authorised) Time() time.Time { return time.Unix(0, a.At) }

// Debited is the metered energy debited for the serve authorised in
// record Auth, written after the debit.
type Debited struct {
	Auth        uint64  `json:"auth"`
	Provenance  string  `json:"provenance"`
	EstimatedUJ uint64  `json:"estimated_uj"`
	MeasuredUJ  *uint64 `json:"measured_uj,omitempty"`
}

// NewDebited records energy e debited for the authorisation in record auth.
func NewDebited(auth uint64, e hw.Energy) *Debited {
	d := &Debited{Auth: auth, Provenance: e.Provenance().String(), EstimatedUJ: e.EstimatedUJ()}
	if m, ok := e.MeasuredUJ(); ok {
		d.MeasuredUJ = &m
	}
	return d
}

// Energy returns the debited figure, checked against the §3.3 coupling.
func (d *Debited) Energy() (hw.Energy, error) {
	p, err := hw.ParseProvenance(d.Provenance)
	if err != nil {
		return hw.Energy{}, err
	}
	return hw.NewEnergy(p, d.MeasuredUJ, d.EstimatedUJ)
}

// Sealed is a receipt handed out: its sequence and its envelope's content
// id, written before it leaves the steward.
type Sealed struct {
	Sequence uint64            `json:"sequence"`
	Envelope receipt.ContentID `json:"envelope"`
}

// Change is one sealed entry of a backend's change record (§6.5), its
// envelope in lowercase hex.
type Change struct {
	Envelope Hex `json:"envelope"`
}

// Witnessed is a receipt shown to the steward, sealed under its key, that
// the journal did not hold: records were cut from it. From this record on
// the steward refuses every grant (§2.2), until an operator restores the
// journal, which removes the record with the cut.
type Witnessed struct {
	Sequence uint64            `json:"sequence"`
	Envelope receipt.ContentID `json:"envelope"`
}

// Revoked is a grant revocation as the steward learned it: from At on
// (Unix nanoseconds; never before the record was written, so that a
// revocation cannot reach back past decisions the journal holds), every
// decision refuses the grant. Replaying revocations in journal order
// rebuilds the revocation list each decision saw.
type Revoked struct {
	Grant receipt.ContentID `json:"grant"`
	At    int64             `json:"at"`
}

// Time returns when the revocation takes effect.
func (r *Revoked) Time() time.Time { return time.Unix(0, r.At) }

// Hex is bytes written as lowercase hex in JSON.
type Hex []byte

// MarshalText implements encoding.TextMarshaler.
func (h Hex) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(h)), nil }

// UnmarshalText implements encoding.TextUnmarshaler, refusing upper case.
func (h *Hex) UnmarshalText(b []byte) error {
	for i, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("character %d is %q, not a lowercase hex digit", i, c)
		}
	}
	out := make([]byte, hex.DecodedLen(len(b)))
	if _, err := hex.Decode(out, b); err != nil {
		return err
	}
	*h = out
	return nil
}

// Kind names the entry's kind.
func (e *Entry) Kind() string {
	switch {
	case e.Authorised != nil:
		return "authorised"
	case e.Debited != nil:
		return "debited"
	case e.Sealed != nil:
		return "sealed"
	case e.Change != nil:
		return "change"
	case e.Witnessed != nil:
		return "witnessed"
	case e.Revoked != nil:
		return "revoked"
	}
	return "empty"
}

// validate checks what an entry must hold, whoever wrote it.
func (e *Entry) validate() error {
	n := 0
	for _, set := range []bool{e.Authorised != nil, e.Debited != nil, e.Sealed != nil, e.Change != nil, e.Witnessed != nil, e.Revoked != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("an entry holds exactly one of authorised, debited, sealed, change, witnessed, revoked; this one holds %d", n)
	}
	switch {
	case e.Authorised != nil:
		a := e.Authorised
		if p := bytes.TrimSpace(a.Presentation); len(p) == 0 || p[0] != '{' {
			return errors.New("authorised: the presentation is not a JSON object")
		}
		if a.Backend == "" || a.Recipe == "" {
			return errors.New("authorised: backend and recipe are required")
		}
		if (a.Model == nil) != (a.Precision == "") {
			return errors.New("authorised: model and precision come together or not at all")
		}
		if err := a.Request.Validate(); err != nil {
			return fmt.Errorf("authorised: request: %w", err)
		}
	case e.Debited != nil:
		if _, err := e.Debited.Energy(); err != nil {
			return fmt.Errorf("debited: %w", err)
		}
	case e.Change != nil:
		if len(e.Change.Envelope) == 0 || len(e.Change.Envelope) > maxEnvelope {
			return fmt.Errorf("change: envelope is %d bytes, want 1 … %d", len(e.Change.Envelope), maxEnvelope)
		}
	}
	return nil
}

// wireRecord is a record's line.
type wireRecord struct {
	Seq   uint64             `json:"seq"`
	Prev  *receipt.ContentID `json:"prev,omitempty"`
	Entry Entry              `json:"entry"`
}

// encodeRecord returns the line for a record (without its newline).
func encodeRecord(seq uint64, prev *receipt.ContentID, e Entry) ([]byte, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	line, err := json.Marshal(wireRecord{Seq: seq, Prev: prev, Entry: e})
	if err != nil {
		return nil, err
	}
	if len(line) > MaxLine {
		return nil, fmt.Errorf("record is %d bytes, limit %d", len(line), MaxLine)
	}
	return line, nil
}

// DecodeRecord parses one line (without its newline), strictly: bounded,
// no unknown keys, one entry, and exactly the bytes the journal would
// have written for it. Errors wrap ErrCorrupt.
func DecodeRecord(line []byte) (Record, error) {
	if len(line) > MaxLine {
		return Record{}, fmt.Errorf("%w: %d bytes, limit %d", ErrCorrupt, len(line), MaxLine)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w wireRecord
	if err := dec.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Record{}, fmt.Errorf("%w: trailing data after the record", ErrCorrupt)
	}
	again, err := encodeRecord(w.Seq, w.Prev, w.Entry)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if !bytes.Equal(again, line) {
		return Record{}, fmt.Errorf("%w: not the journal's own encoding of the record", ErrCorrupt)
	}
	return Record{Seq: w.Seq, Prev: w.Prev, Entry: w.Entry, Hash: receipt.Sum(line)}, nil
}
