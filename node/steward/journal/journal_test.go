package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/receipt"
)

func authorised(n int) Entry {
	return Entry{Authorised: &Authorised{
		Presentation: json.RawMessage(`{"caller":"did:key:z","n":` + string(rune('0'+n%10)) + `}`),
		Request: receipt.ServeRequest{PromptHash: receipt.PromptHash([]byte{byte(n)}), PromptTokens: 3, MaxTokens: 4,
			FidelityFloor: receipt.F1, JouleCeilingUJ: 5000},
		Backend: "cpu", Recipe: "mesh-reference", At: 1_700_000_000_000_000_000 + int64(n),
	}}
}

func debited(auth uint64, uj uint64) Entry { return Entry{Debited: NewDebited(auth, hw.Estimated(uj))} }

func sealed(seq uint64) Entry {
	return Entry{Sealed: &Sealed{Sequence: seq, Envelope: receipt.Sum([]byte{byte(seq)})}}
}

func open(t *testing.T, path string) *Journal {
	t.Helper()
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func appendAll(t *testing.T, j *Journal, es ...Entry) {
	t.Helper()
	for _, e := range es {
		if _, err := j.Append(e); err != nil {
			t.Fatal(err)
		}
	}
}

// serves is three serves' worth of records: authorised, debited, sealed.
func serves() []Entry {
	return []Entry{authorised(0), debited(0, 100), sealed(0), authorised(1), authorised(2), debited(4, 7), sealed(1),
		debited(3, 9), sealed(2), {Change: &Change{Envelope: Hex{0xd2, 0x84}}}, {Witnessed: &Witnessed{Sequence: 9, Envelope: receipt.ContentID{1}}}}
}

func replayAll(t *testing.T, j *Journal) []Record {
	t.Helper()
	var out []Record
	if err := j.Replay(func(r Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAppendReopen: records chain by the hash of their line, survive a
// reopen, and replay as written.
func TestAppendReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal", "steward.jsonl")
	j := open(t, path)
	var got []Record
	j.opts.AfterAppend = func(r Record) { got = append(got, r) }
	appendAll(t, j, serves()...)
	if len(got) != len(serves()) {
		t.Fatalf("AfterAppend saw %d records", len(got))
	}
	j.Close()
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("journal file mode %v %v", st.Mode(), err)
	}
	raw, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	j = open(t, path)
	if j.Len() != uint64(len(serves())) || j.Size() != int64(len(raw)) {
		t.Fatalf("reopened with %d records, %d bytes", j.Len(), j.Size())
	}
	recs := replayAll(t, j)
	for i, r := range recs {
		if r.Seq != uint64(i) || r.Hash != receipt.Sum(lines[i]) || r.Hash != got[i].Hash || r.Entry.Kind() != serves()[i].Kind() {
			t.Fatalf("record %d: %+v", i, r)
		}
		if (i == 0) != (r.Prev == nil) || i > 0 && *r.Prev != recs[i-1].Hash {
			t.Fatalf("record %d does not chain", i)
		}
	}
	if e, _ := recs[1].Entry.Debited.Energy(); e.UJ() != 100 {
		t.Fatalf("debit %v", e)
	}
	// And it continues where it stopped.
	appendAll(t, j, sealed(3))
	if recs := replayAll(t, j); len(recs) != len(serves())+1 || *recs[len(recs)-1].Prev != recs[len(recs)-2].Hash {
		t.Fatal("append after reopen does not chain")
	}
}

// TestTornTail: a final line with no newline is an append cut short; it is
// dropped, cut from the file, logged with its size and record number, and
// the next append starts a clean line.
func TestTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j := open(t, path)
	appendAll(t, j, serves()[:2]...)
	// The checkpoint as a crash in the middle of the third append leaves
	// it: the record is never synced whole, so never checkpointed.
	headAt2, err := os.ReadFile(HeadPath(path))
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, j, serves()[2])
	j.Close()
	whole, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(whole, []byte("\n"))
	for cut := 1; cut < len(lines[2]); cut += 7 { // every way the last append can be cut short
		if err := os.WriteFile(path, append(bytes.Clone(whole[:len(whole)-len(lines[2])]), lines[2][:cut]...), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(HeadPath(path), headAt2, 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		j, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		t.Cleanup(func() { j.Close() })
		if j.Len() != 2 {
			t.Fatalf("cut at %d: %d records", cut, j.Len())
		}
		if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "torn final line") ||
			!strings.Contains(l, "record=2") || !strings.Contains(l, fmt.Sprintf("bytes=%d", cut)) {
			t.Fatalf("cut at %d: the drop was not logged with its record and size: %q", cut, l)
		}
		appendAll(t, j, sealed(0))
		j.Close()
		if got, _ := os.ReadFile(path); !bytes.Equal(got, whole) {
			t.Fatalf("cut at %d: the re-append did not reproduce the journal", cut)
		}
	}
	// A torn tail longer than any record is dropped too.
	if err := os.WriteFile(path, append(bytes.Clone(whole), bytes.Repeat([]byte("x"), MaxLine+100)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if j := open(t, path); j.Len() != 3 || j.Size() != int64(len(whole)) {
		t.Fatalf("long torn tail: %d records, %d bytes", j.Len(), j.Size())
	}
}

// TestOpenRefuses: every journal a steward could not have produced is
// refused, naming the record.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	j := open(t, good)
	appendAll(t, j, serves()...)
	j.Close()
	raw, _ := os.ReadFile(good)
	lines := bytes.SplitAfter(raw, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty tail after the last newline
	join := func(ls ...[]byte) []byte { return bytes.Join(ls, nil) }
	without := func(i int) []byte {
		return join(append(append([][]byte(nil), lines[:i]...), lines[i+1:]...)...)
	}
	edit := func(i int, from, to string) []byte {
		ls := append([][]byte(nil), lines...)
		ls[i] = bytes.Replace(ls[i], []byte(from), []byte(to), 1)
		if bytes.Equal(ls[i], lines[i]) {
			t.Fatalf("edit of line %d changed nothing", i)
		}
		return join(ls...)
	}
	// rechain rewrites records from i on so that seq and prev hold again,
	// keeping their entries: a well-formed journal whose entries break a
	// rule.
	rechain := func(entries ...Entry) []byte {
		var out []byte
		var prev *receipt.ContentID
		for i, e := range entries {
			line, err := encodeRecord(uint64(i), prev, e)
			if err != nil {
				t.Fatal(err)
			}
			h := receipt.Sum(line)
			prev = &h
			out = append(append(out, line...), '\n')
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
		seq  uint64
		want error
	}{
		{"record removed from the middle", without(4), 4, ErrBrokenChain},
		{"record edited", edit(1, `"estimated_uj":100`, `"estimated_uj":1`), 2, ErrBrokenChain},
		{"records swapped", join(lines[0], lines[2], lines[1]), 1, ErrBrokenChain},
		{"first record removed", without(0), 0, ErrBrokenChain},
		{"not JSON", join(lines[0], []byte("hello\n")), 1, ErrCorrupt},
		{"empty line", join(lines[0], []byte("\n")), 1, ErrCorrupt},
		{"unknown key", edit(2, `{"seq"`, `{"colour":1,"seq"`), 2, ErrCorrupt},
		{"not the journal's encoding", edit(2, `{"seq":2`, `{ "seq":2`), 2, ErrCorrupt},
		{"two entries in one record", rechainRaw(t, lines[0], `{"seq":1,"prev":"PREV","entry":{"sealed":{"sequence":0,"envelope":"`+receipt.ContentID{}.String()+`"},"witnessed":{"sequence":0,"envelope":"`+receipt.ContentID{}.String()+`"}}}`), 1, ErrCorrupt},
		{"energy breaks the coupling", rechainRaw(t, lines[0], `{"seq":1,"prev":"PREV","entry":{"debited":{"auth":0,"provenance":"HwShunt","estimated_uj":5}}}`), 1, ErrCorrupt},
		{"debit with no authorisation", rechain(authorised(0), debited(5, 1)), 1, ErrOrphanDebit},
		{"debit of a seal", rechain(sealed(0), debited(0, 1)), 1, ErrOrphanDebit},
		{"debited twice", rechain(authorised(0), debited(0, 1), debited(0, 1)), 2, ErrOrphanDebit},
		{"first receipt not 0", rechain(sealed(1)), 0, ErrOutOfSequence},
		{"receipt skipped", rechain(sealed(0), sealed(2)), 1, ErrOutOfSequence},
		{"receipt repeated", rechain(sealed(0), sealed(0)), 1, ErrOutOfSequence},
		{"over-long line", join(lines[0], bytes.Repeat([]byte("x"), MaxLine+10), []byte("\n")), 1, ErrCorrupt},
		{"very long line", join(lines[0], bytes.Repeat([]byte("x"), 8<<20), []byte("\n")), 1, ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			j, err := Open(path, Options{})
			runtime.ReadMemStats(&after)
			// A damaged line is not read whole (the longest here is
			// 8 MiB).
			if got := after.TotalAlloc - before.TotalAlloc; got > uint64(4*MaxLine+len(tc.data)/8) {
				t.Errorf("opening %d bytes allocated %d", len(tc.data), got)
			}
			var re *RecordError
			if !errors.As(err, &re) || !errors.Is(err, tc.want) || re.Seq != tc.seq {
				if j != nil {
					j.Close()
				}
				t.Fatalf("got %v, want %v at record %d", err, tc.want, tc.seq)
			}
			if !strings.Contains(err.Error(), "will not serve") {
				t.Errorf("message does not say what it means: %v", err)
			}
			// Refused, not repaired: the file is as it was, and unlocked.
			if got, _ := os.ReadFile(path); !bytes.Equal(got, tc.data) {
				t.Fatal("a refused journal was modified")
			}
			if j, err := Open(path, Options{}); !errors.As(err, &re) {
				t.Fatalf("reopen: %v", err)
			} else if j != nil {
				j.Close()
			}
		})
	}
}

// rechainRaw appends a hand-written line after first, with PREV replaced
// by first's hash.
func rechainRaw(t *testing.T, first []byte, line string) []byte {
	t.Helper()
	h := receipt.Sum(bytes.TrimSuffix(first, []byte("\n")))
	return append(bytes.Clone(first), []byte(strings.Replace(line, "PREV", h.String(), 1)+"\n")...)
}

// TestAppendRefuses: the journal refuses to write what it would refuse to
// open, and stays usable.
func TestAppendRefuses(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "j"))
	appendAll(t, j, authorised(0), sealed(0))
	req0 := authorised(0).Authorised.Request
	for name, e := range map[string]Entry{
		"orphan debit":              debited(1, 5),
		"receipt out of sequence":   sealed(2),
		"empty entry":               {},
		"two entries":               {Sealed: &Sealed{Sequence: 1}, Witnessed: &Witnessed{}},
		"presentation not object":   {Authorised: &Authorised{Presentation: json.RawMessage(`"x"`), Request: req0, Backend: "b", Recipe: "r"}},
		"model without precision":   {Authorised: &Authorised{Presentation: json.RawMessage(`{}`), Request: req0, Backend: "b", Recipe: "r", Model: &receipt.ContentID{}}},
		"oversized change":          {Change: &Change{Envelope: make(Hex, maxEnvelope+1)}},
		"oversized authorisation":   {Authorised: &Authorised{Presentation: json.RawMessage(`{"x":"` + strings.Repeat("a", MaxLine) + `"}`), Request: req0, Backend: "b", Recipe: "r"}},
		"invalid request":           {Authorised: &Authorised{Presentation: json.RawMessage(`{}`), Request: receipt.ServeRequest{FidelityFloor: 9}, Backend: "b", Recipe: "r"}},
		"debit breaks the coupling": {Debited: &Debited{Auth: 0, Provenance: "HwShunt"}},
	} {
		if _, err := j.Append(e); err == nil {
			t.Errorf("%s: appended", name)
		}
	}
	appendAll(t, j, debited(0, 5), sealed(1))
	if j.Len() != 4 {
		t.Fatalf("%d records", j.Len())
	}
}

// TestAppendFailureLatches: a write that fails leaves nothing behind, and
// once the file cannot be trusted the journal takes no more.
func TestAppendFailureLatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j := open(t, path)
	appendAll(t, j, authorised(0))
	j.f.Close() // the descriptor fails under the journal
	if _, err := j.Append(sealed(0)); err == nil {
		t.Fatal("append on a dead file succeeded")
	}
	if _, err := j.Append(sealed(0)); !errors.Is(err, ErrFailed) {
		t.Fatalf("got %v, want ErrFailed", err)
	}
	j.f = nil
	j = open(t, path)
	if j.Len() != 1 {
		t.Fatalf("%d records after the failure", j.Len())
	}
}

// TestOpenSyncsDirectories: a new journal's name is durable before any
// record is: its directory is synced, and so is the parent of every
// directory Open created; reopening syncs the journal's directory only.
func TestOpenSyncsDirectories(t *testing.T) {
	base := t.TempDir()
	var synced []string
	real := syncDir
	syncDir = func(dir string) error { synced = append(synced, dir); return real(dir) }
	t.Cleanup(func() { syncDir = real })
	path := filepath.Join(base, "state", "journal", "steward.jsonl")
	j := open(t, path)
	want := []string{filepath.Join(base, "state", "journal"), filepath.Join(base, "state"), base}
	if !slices.Equal(synced, want) {
		t.Fatalf("created: synced %v, want %v", synced, want)
	}
	j.Close()
	synced = nil
	open(t, path)
	if want := want[:1]; !slices.Equal(synced, want) {
		t.Fatalf("reopened: synced %v, want %v", synced, want)
	}
	// A directory that cannot be synced fails the open: no record is
	// written under a name that may not survive.
	syncDir = func(string) error { return errors.New("I/O error") }
	if j, err := Open(filepath.Join(base, "other", "j"), Options{}); err == nil {
		j.Close()
		t.Fatal("opened a journal whose directory could not be synced")
	}
}

// TestLockInProcess: a second Open of a held journal fails, clearly, and
// succeeds once the first is closed.
func TestLockInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j := open(t, path)
	if _, err := Open(path, Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v", err)
	}
	j.Close()
	if _, err := j.Append(sealed(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	open(t, path)
}

// TestOnSync: each append tells OnSync of its two fsyncs, the record's and
// then the checkpoint's, and nothing else does.
func TestOnSync(t *testing.T) {
	var syncs []string
	j, err := Open(filepath.Join(t.TempDir(), "j"), Options{OnSync: func(file string, took time.Duration) {
		if took < 0 {
			t.Errorf("%s fsync took %v", file, took)
		}
		syncs = append(syncs, file)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if len(syncs) != 0 {
		t.Fatalf("opening told OnSync of %v", syncs)
	}
	appendAll(t, j, serves()[:3]...)
	want := []string{"journal", "checkpoint", "journal", "checkpoint", "journal", "checkpoint"}
	if !slices.Equal(syncs, want) {
		t.Fatalf("OnSync heard %v, want %v", syncs, want)
	}
}
