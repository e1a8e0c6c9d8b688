package node

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
)

// ReceiptLogPath is the steward's receipt log in stateDir, beside its
// journal: every receipt it sealed, one a line, for export (GET
// /v1/mesh/receipts, meshcli receipt log). The journal records only each
// receipt's envelope id; this log keeps the envelopes.
func ReceiptLogPath(stateDir string) string {
	return filepath.Join(stateDir, "journal", "receipts.jsonl")
}

// DefaultReceiptLogBytes bounds the receipt log when steward.receipt_log_bytes
// is not set: about 40 000 receipts.
const DefaultReceiptLogBytes = 64 << 20

// Bounds on steward.receipt_log_bytes.
const (
	MinReceiptLogBytes = 1 << 20
	MaxReceiptLogBytes = 64 << 30
)

// receiptLog is the steward's receipt log: one JSON object a line,
// {"sequence":N,"envelope_hex":"…"}, in chain order with no gap, which
// is the form `meshcli receipt verify --log` reads.
//
// The steward archives each receipt after sealing it and before its
// journal records it, and the log syncs it first, so the log holds every
// receipt the journal does, and at most one more (a receipt the journal
// then failed to record, withheld): the next receipt, which takes its
// sequence, replaces it, and at start the log is cut back to the journal's
// chain head. When the log grows past its bound, its older half is
// dropped: it then begins past genesis, at first_sequence.
type receiptLog struct {
	path string
	max  int64
	log  *slog.Logger

	mu      sync.RWMutex
	f       *os.File // nil until open
	first   uint64   // the sequence of the first line
	offsets []int64  // offsets[i]: where the line of sequence first+i starts
	size    int64
}

func newReceiptLog(path string, max int64, log *slog.Logger) *receiptLog {
	if max <= 0 {
		max = DefaultReceiptLogBytes
	}
	return &receiptLog{path: path, max: max, log: log}
}

// open reads the log and cuts it back to the steward's chain head: lines
// at or past head.Next were never journaled. A log that does not end at
// the head (lost, damaged, or older than this version's first receipt)
// cannot be continued: it is set aside, named in the log, and a new one
// starts at the head.
func (l *receiptLog) open(head receipt.Head) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("receipt log: %w", err)
	}
	l.f = f
	if err := l.scan(); err != nil {
		return l.restart(head, fmt.Sprintf("it does not read: %v", err))
	}
	for n := len(l.offsets); n > 0 && l.first+uint64(n)-1 >= head.Next; n-- {
		if err := l.truncate(n - 1); err != nil {
			return err
		}
	}
	if len(l.offsets) == 0 {
		l.first = head.Next
		return nil
	}
	last := l.first + uint64(len(l.offsets)) - 1
	if last+1 != head.Next {
		return l.restart(head, fmt.Sprintf("it ends at receipt %d and the journal at %d", last, head.Next-1))
	}
	env, err := l.envelope(len(l.offsets) - 1)
	if err != nil {
		return l.restart(head, err.Error())
	}
	if receipt.Sum(env) != head.Last {
		return l.restart(head, fmt.Sprintf("its receipt %d is not the one the journal holds", last))
	}
	return nil
}

// restart sets the log aside and starts an empty one at head.
func (l *receiptLog) restart(head receipt.Head, why string) error {
	// A name of its own: a log set aside in the same second must not
	// replace the one before it.
	now := time.Now().Unix()
	aside := fmt.Sprintf("%s.%d.old", l.path, now)
	for n := 2; ; n++ {
		if _, err := os.Lstat(aside); err != nil {
			break // free (or unreadable: the rename then says why)
		}
		aside = fmt.Sprintf("%s.%d-%d.old", l.path, now, n)
	}
	l.f.Close()
	l.f = nil
	if err := os.Rename(l.path, aside); err != nil {
		return fmt.Errorf("receipt log: setting it aside: %w", err)
	}
	l.log.Warn("the receipt log does not match the journal, so it restarts at the journal's head; the old one is kept",
		"why", why, "kept_as", aside, "first_sequence", head.Next)
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("receipt log: %w", err)
	}
	l.f, l.first, l.offsets, l.size = f, head.Next, nil, 0
	return nil
}

// maxLogLine bounds a line of the log: one receipt, its envelope (at
// most about 17 KB, receipt's maxEnvelopeSize) in hex and a few fields,
// with room to spare.
const maxLogLine = 1 << 20

// scan indexes the lines; a last line without its newline (an append cut
// short) is cut off.
func (l *receiptLog) scan() error {
	l.offsets, l.size = nil, 0
	if _, err := l.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(l.f, 64<<10)
	var off int64
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line past the buffer, gathered piece by piece (each
			// piece is valid only until the next read), up to a
			// receipt's bound: a damaged log is set aside, not read
			// whole into memory.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(long) > maxLogLine {
					return fmt.Errorf("line %d: longer than %d bytes", len(l.offsets)+1, maxLogLine)
				}
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				l.log.Warn("receipt log: dropping a last line cut short", "file", l.path, "bytes", len(line))
				if err := l.f.Truncate(off); err != nil {
					return err
				}
			}
			break
		}
		if err != nil {
			return err
		}
		seq, err := lineSequence(line)
		if err != nil {
			return fmt.Errorf("line %d: %w", len(l.offsets)+1, err)
		}
		if len(l.offsets) == 0 {
			l.first = seq
		} else if want := l.first + uint64(len(l.offsets)); seq != want {
			return fmt.Errorf("line %d holds receipt %d where %d comes next", len(l.offsets)+1, seq, want)
		}
		l.offsets = append(l.offsets, off)
		off += int64(len(line))
	}
	l.size = off
	_, err := l.f.Seek(0, io.SeekEnd)
	return err
}

// lineSequence reads the sequence a line starts with, without decoding
// the rest: {"sequence":N,.
func lineSequence(line []byte) (uint64, error) {
	const prefix = `{"sequence":`
	rest, ok := bytes.CutPrefix(line, []byte(prefix))
	end := bytes.IndexByte(rest, ',')
	if !ok || end <= 0 {
		return 0, errors.New(`not a receipt line ({"sequence":N,"envelope_hex":"…"})`)
	}
	return strconv.ParseUint(string(rest[:end]), 10, 64)
}

// truncate cuts the log back to its first i lines.
func (l *receiptLog) truncate(i int) error {
	off := l.offsets[i]
	if err := l.f.Truncate(off); err != nil {
		return fmt.Errorf("receipt log: %w", err)
	}
	if _, err := l.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("receipt log: %w", err)
	}
	l.offsets, l.size = l.offsets[:i], off
	return nil
}

// line reads line i (its newline included).
func (l *receiptLog) line(i int) ([]byte, error) {
	end := l.size
	if i+1 < len(l.offsets) {
		end = l.offsets[i+1]
	}
	b := make([]byte, end-l.offsets[i])
	if _, err := l.f.ReadAt(b, l.offsets[i]); err != nil {
		return nil, fmt.Errorf("receipt log: %w", err)
	}
	return b, nil
}

type receiptLine struct {
	Sequence    uint64 `json:"sequence"`
	EnvelopeHex string `json:"envelope_hex"`
}

// envelope decodes line i's envelope.
func (l *receiptLog) envelope(i int) ([]byte, error) {
	b, err := l.line(i)
	if err != nil {
		return nil, err
	}
	var rl receiptLine
	if err := json.Unmarshal(b, &rl); err != nil {
		return nil, fmt.Errorf("line %d: %w", i+1, err)
	}
	return hex.DecodeString(rl.EnvelopeHex)
}

// Archive implements steward.ReceiptArchive: the receipt is written and
// synced before the journal records it. A receipt of the sequence the
// log ends with replaces that one (the journal did not record it).
func (l *receiptLog) Archive(s *receipt.Sealed) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("receipt log: not open")
	}
	seq := s.Receipt.Sequence
	if n := uint64(len(l.offsets)); n > 0 && seq == l.first+n-1 {
		if err := l.truncate(int(n - 1)); err != nil {
			return err
		}
	}
	if len(l.offsets) == 0 {
		l.first = seq
	} else if want := l.first + uint64(len(l.offsets)); seq != want {
		return fmt.Errorf("receipt log: receipt %d where %d comes next", seq, want)
	}
	line, err := json.Marshal(receiptLine{Sequence: seq, EnvelopeHex: hex.EncodeToString(s.Envelope)})
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if _, err := l.f.Write(line); err != nil {
		l.f.Truncate(l.size) // leave no torn line behind, if the disk lets us
		l.f.Seek(l.size, io.SeekStart)
		return fmt.Errorf("receipt log: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("receipt log: %w", err)
	}
	l.offsets = append(l.offsets, l.size)
	l.size += int64(len(line))
	if l.size > l.max {
		l.compact()
	}
	return nil
}

// compact drops the older receipts so that the log holds at most half
// its bound. It runs under the steward's seal lock, once every so many
// receipts; a failure keeps the whole log (and is logged).
func (l *receiptLog) compact() {
	k := 0
	for k < len(l.offsets)-1 && l.size-l.offsets[k] > l.max/2 {
		k++
	}
	keep := l.offsets[k]
	tmp, err := os.CreateTemp(filepath.Dir(l.path), "."+filepath.Base(l.path)+".tmp-*")
	if err == nil {
		defer os.Remove(tmp.Name())
		_, err = io.Copy(tmp, io.NewSectionReader(l.f, keep, l.size-keep))
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), l.path)
		}
	}
	if err != nil {
		l.log.Warn("receipt log: could not drop its older receipts; it stays whole, over its bound", "file", l.path, "bound_bytes", l.max, "err", err)
		return
	}
	f, err := os.OpenFile(l.path, os.O_RDWR, 0o600)
	if err != nil {
		// The renamed file is the log; without a handle on it the next
		// archive fails, and the serve with it, which is said then.
		l.log.Error("receipt log: reopening it after dropping its older receipts", "err", err)
		l.f.Close()
		l.f = nil
		return
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		l.log.Error("receipt log: reopening it after dropping its older receipts", "err", err)
	}
	l.f.Close()
	l.f = f
	dropped := l.first
	l.first += uint64(k)
	offsets := make([]int64, len(l.offsets)-k)
	for i := range offsets {
		offsets[i] = l.offsets[k+i] - keep
	}
	l.offsets, l.size = offsets, l.size-keep
	l.log.Info("receipt log: dropped its older receipts to stay within its bound", "file", l.path, "bound_bytes", l.max,
		"dropped", fmt.Sprintf("%d…%d", dropped, l.first-1), "first_sequence", l.first)
}

// page is up to limit receipts from sequence from (or the first the log
// holds, if that is later), as their lines, with where the log begins and
// ends.
func (l *receiptLog) page(from uint64, limit int) (lines []json.RawMessage, first, next uint64, err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	first, next = l.first, l.first+uint64(len(l.offsets))
	if l.f == nil {
		return nil, first, next, errors.New("receipt log: not open")
	}
	from = max(from, first)
	for seq := from; seq < next && len(lines) < limit; seq++ {
		b, err := l.line(int(seq - first))
		if err != nil {
			return nil, first, next, err
		}
		lines = append(lines, json.RawMessage(bytes.TrimSuffix(b, []byte("\n"))))
	}
	return lines, first, next, nil
}

func (l *receiptLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
