package journal

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// headOf reads the checkpoint beside the journal at path.
func headOf(t *testing.T, path string) Checkpoint {
	t.Helper()
	h, c, err := readHead(HeadPath(path))
	if err != nil {
		t.Fatal(err)
	}
	h.close()
	return c
}

// written is a journal of serves() records, closed, and its bytes.
func written(t *testing.T) (path string, whole []byte, lines [][]byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "journal", "steward.jsonl")
	j := open(t, path)
	appendAll(t, j, serves()...)
	j.Close()
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines = bytes.SplitAfter(whole, []byte("\n"))
	return path, whole, lines[:len(lines)-1]
}

// otherChain is a valid journal of n records that is not the one written:
// the same kinds of entries, different contents.
func otherChain(t *testing.T, n int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "other.jsonl")
	j := open(t, path)
	for i := 0; i < n; i++ {
		appendAll(t, j, authorised(100+i))
	}
	j.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAttackJournalRollback: a journal cut at a line boundary, emptied,
// deleted, or replaced by another valid chain (shorter, as long or
// longer) is refused with a *RollbackError naming both heads, and left as
// it was; the next append would otherwise reuse a sequence already handed
// out. AcceptRollback then lets it open, as it stands.
func TestAttackJournalRollback(t *testing.T) {
	path, whole, lines := written(t)
	n := uint64(len(lines))
	cp := headOf(t, path)
	if cp.Records != n || cp.Size != int64(len(whole)) {
		t.Fatalf("checkpoint after %d appends: %v", n, cp)
	}
	head0, err := os.ReadFile(HeadPath(path))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		journal []byte // nil: the file is deleted
		records uint64 // what the tampered journal holds
	}{
		{"last record cut at a line boundary", bytes.Join(lines[:n-1], nil), n - 1},
		{"last three records cut", bytes.Join(lines[:n-3], nil), n - 3},
		{"all but the first record cut", lines[0], 1},
		{"emptied", []byte{}, 0},
		{"deleted", nil, 0},
		{"replaced by a shorter chain", otherChain(t, 3), 3},
		{"replaced by a chain as long", otherChain(t, int(n)), n},
		{"replaced by a longer chain", otherChain(t, int(n)+4), n + 4},
		{"cut, then a torn line", append(bytes.Join(lines[:n-1], nil), lines[n-1][:9]...), n - 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(HeadPath(path), head0, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.journal == nil {
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, tc.journal, 0o600); err != nil {
				t.Fatal(err)
			}
			j, err := Open(path, Options{})
			var re *RollbackError
			if !errors.Is(err, ErrRolledBack) || !errors.As(err, &re) {
				if j != nil {
					j.Close()
				}
				t.Fatalf("opened a rolled-back journal: %v", err)
			}
			if re.Journal.Records != tc.records || re.Checkpoint != cp || re.CheckpointPath != HeadPath(path) || re.Path != path {
				t.Fatalf("error names journal %v, checkpoint %v at %s; want %d records against %v", re.Journal, re.Checkpoint, re.CheckpointPath, tc.records, cp)
			}
			if msg := err.Error(); !strings.Contains(msg, "will not serve") || !strings.Contains(msg, "accept the journal as it stands") {
				t.Errorf("the message does not say what it means and what to do: %s", msg)
			}
			// Refused, not repaired: both files as they were.
			if got, _ := os.ReadFile(path); tc.journal != nil && !bytes.Equal(got, tc.journal) {
				t.Fatal("a refused journal was modified")
			}
			if got, _ := os.ReadFile(HeadPath(path)); !bytes.Equal(got, head0) {
				t.Fatal("a refused journal's checkpoint was modified")
			}
			// Refused again on the next try, and the lock was released.
			if _, err := Open(path, Options{}); !errors.Is(err, ErrRolledBack) {
				t.Fatalf("second open: %v", err)
			}

			acc, err := AcceptRollback(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !acc.Changed || acc.Was == nil || *acc.Was != cp || acc.Journal.Records != tc.records {
				t.Fatalf("acceptance %+v", acc)
			}
			j = open(t, path)
			if j.Len() != tc.records {
				t.Fatalf("accepted journal opens with %d records, want %d", j.Len(), tc.records)
			}
			j.Close()
			if got := headOf(t, path); got.Records != tc.records {
				t.Fatalf("checkpoint after acceptance: %v", got)
			}
		})
	}
}

// TestCheckpointBehindAfterCrash: a crash between a record's sync and its
// checkpoint's leaves the journal ahead of the checkpoint. That journal
// opens, the checkpoint catches up (logged), and from then on cutting the
// new record is refused.
func TestCheckpointBehindAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j := open(t, path)
	appendAll(t, j, serves()[:3]...)
	// The journal half of two appends, as a crash before each checkpoint
	// write would leave them.
	j.mu.Lock()
	for _, e := range serves()[3:5] {
		if _, err := j.appendRecord(e); err != nil {
			t.Fatal(err)
		}
	}
	j.mu.Unlock()
	j.Close()
	if got := headOf(t, path); got.Records != 3 {
		t.Fatalf("checkpoint %v, want 3 records", got)
	}
	var logs bytes.Buffer
	j, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("a journal ahead of its checkpoint: %v", err)
	}
	if j.Len() != 5 {
		t.Fatalf("%d records", j.Len())
	}
	j.Close()
	if got := headOf(t, path); got.Records != 5 || got.Size != j.Size() {
		t.Fatalf("checkpoint %v after reopening, want 5 records", got)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "from_records=3 to_records=5") {
		t.Fatalf("catching up was not logged: %q", l)
	}
	raw, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(raw, []byte("\n"))
	if err := os.WriteFile(path, bytes.Join(lines[:4], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("the caught-up record cut: %v", err)
	}
}

// TestCheckpointTornSlot: a checkpoint write torn by a crash spoils one
// slot; the other still holds the one before, which the journal
// satisfies. With no intact slot the journal is refused (ErrBadCheckpoint)
// until the operator accepts it.
func TestCheckpointTornSlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j := open(t, path)
	appendAll(t, j, serves()[:4]...)
	gen := j.head.gen
	j.Close()
	hp := HeadPath(path)
	raw, err := os.ReadFile(hp)
	if err != nil || len(raw) != headLen {
		t.Fatalf("checkpoint file %d bytes, %v", len(raw), err)
	}
	// Tear the newest slot: its first half written, its second not.
	newest := int(gen%2) * slotStride
	torn := bytes.Clone(raw)
	for i := newest + slotLen/2; i < newest+slotLen; i++ {
		torn[i] ^= 0xff
	}
	if err := os.WriteFile(hp, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := headOf(t, path); got.Records != 3 {
		t.Fatalf("with the newest slot torn the checkpoint reads %v, want the one before (3 records)", got)
	}
	j = open(t, path)
	if j.Len() != 4 {
		t.Fatalf("%d records", j.Len())
	}
	appendAll(t, j, serves()[4])
	j.Close()
	if got := headOf(t, path); got.Records != 5 {
		t.Fatalf("checkpoint %v after an append, want 5 records", got)
	}

	// No intact slot: both torn, or the file cut short.
	raw, _ = os.ReadFile(hp)
	for name, bad := range map[string][]byte{
		"both slots torn": func() []byte {
			b := bytes.Clone(raw)
			b[20] ^= 1
			b[slotStride+20] ^= 1
			return b
		}(),
		"file emptied": {},
		"file cut":     raw[:slotLen-1],
	} {
		if err := os.WriteFile(hp, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, Options{})
		if !errors.Is(err, ErrBadCheckpoint) || !strings.Contains(err.Error(), hp) {
			t.Fatalf("%s: %v, want ErrBadCheckpoint naming %s", name, err, hp)
		}
		acc, err := AcceptRollback(path, Options{})
		if err != nil || acc.Was != nil || !errors.Is(acc.WasErr, ErrBadCheckpoint) || !acc.Changed || acc.Journal.Records != 5 {
			t.Fatalf("%s: accept: %+v, %v", name, acc, err)
		}
		j := open(t, path)
		j.Close()
	}
}

// TestCheckpointMigration: a journal from before checkpoints is given one
// (logged at WARN), after which a cut is refused; a new journal gets one
// quietly; a checkpoint of 0 records accepts any journal.
func TestCheckpointMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.jsonl")
	j := open(t, path)
	appendAll(t, j, serves()...)
	j.Close()
	if err := os.Remove(HeadPath(path)); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	j, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "created a chain-head checkpoint") ||
		!strings.Contains(l, "records=11") {
		t.Fatalf("migration not logged: %q", l)
	}
	st, err := os.Stat(HeadPath(path))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint file %v, %v; want mode 0600", st, err)
	}
	if got := headOf(t, path); got.Records != uint64(len(serves())) {
		t.Fatalf("migrated checkpoint %v", got)
	}
	raw, _ := os.ReadFile(path)
	if err := os.WriteFile(path, raw[:bytes.LastIndexByte(raw[:len(raw)-1], '\n')+1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("a cut after migration: %v", err)
	}

	// Fresh: no journal, no checkpoint.
	fresh := filepath.Join(t.TempDir(), "state", "journal", "steward.jsonl")
	logs.Reset()
	j, err = Open(fresh, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if logs.Len() != 0 {
		t.Fatalf("a fresh journal logged %q", logs.String())
	}
	if got := headOf(t, fresh); got != (Checkpoint{}) {
		t.Fatalf("fresh checkpoint %v", got)
	}
	// Deleting a journal that never held a record loses nothing.
	if err := os.Remove(fresh); err != nil {
		t.Fatal(err)
	}
	open(t, fresh).Close()
}

// TestAcceptRollbackRefuses: accepting needs the journal's lock, and a
// journal that is not one a steward produced stays refused. Accepting a
// journal its checkpoint already agrees with writes nothing.
func TestAcceptRollbackRefuses(t *testing.T) {
	path, _, _ := written(t)
	j := open(t, path)
	if _, err := AcceptRollback(path, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("accept while a steward holds the journal: %v", err)
	}
	j.Close()
	before, _ := os.ReadFile(HeadPath(path))
	acc, err := AcceptRollback(path, Options{})
	if err != nil || acc.Changed || acc.Was == nil || *acc.Was != acc.Journal {
		t.Fatalf("accepting an agreeing journal: %+v, %v", acc, err)
	}
	if after, _ := os.ReadFile(HeadPath(path)); !bytes.Equal(before, after) {
		t.Fatal("accepting an agreeing journal rewrote its checkpoint")
	}
	raw, _ := os.ReadFile(path)
	if err := os.WriteFile(path, bytes.Replace(raw, []byte(`"seq":1,`), []byte(`"seq":7,`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	var re *RecordError
	if _, err := AcceptRollback(path, Options{}); !errors.As(err, &re) || !errors.Is(err, ErrBrokenChain) {
		t.Fatalf("accepting a broken chain: %v", err)
	}
	if after, _ := os.ReadFile(HeadPath(path)); !bytes.Equal(before, after) {
		t.Fatal("a refused acceptance rewrote the checkpoint")
	}
}

// TestCheckpointFailureLatches: a record is durable but its checkpoint
// cannot be written: Append says so, the journal takes no more, and a
// reopen finds the record (the checkpoint behind it is allowed).
func TestCheckpointFailureLatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j := open(t, path)
	appendAll(t, j, authorised(0))
	j.head.f.Close() // the checkpoint's descriptor fails under the journal
	if _, err := j.Append(debited(0, 5)); err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("append with a dead checkpoint: %v", err)
	}
	if _, err := j.Append(sealed(0)); !errors.Is(err, ErrFailed) {
		t.Fatalf("got %v, want ErrFailed", err)
	}
	j.Close()
	j = open(t, path)
	if j.Len() != 2 {
		t.Fatalf("%d records after the failure, want 2", j.Len())
	}
}

// BenchmarkAppend: what the checkpoint adds to an append. "record" is the
// journal's write and sync alone; "record+checkpoint" is Append as the
// steward calls it (about three times a granted serve).
func BenchmarkAppend(b *testing.B) {
	for _, withHead := range []bool{false, true} {
		name := "record"
		if withHead {
			name = "record+checkpoint"
		}
		b.Run(name, func(b *testing.B) {
			j, err := Open(filepath.Join(b.TempDir(), "j.jsonl"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			e := Entry{Sealed: &Sealed{}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.Sealed = &Sealed{Sequence: uint64(i)}
				if withHead {
					_, err = j.Append(e)
				} else {
					j.mu.Lock()
					_, err = j.appendRecord(e)
					j.mu.Unlock()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
