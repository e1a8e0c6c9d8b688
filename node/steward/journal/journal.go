package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/meshnode/meshnode/node/receipt"
)

// Options tune a journal.
type Options struct {
	// AfterAppend, when set, is called with every record once it is
	// durable, before Append returns. The crash tests use it to report
	// progress; it must not call back into the journal.
	AfterAppend func(Record)
}

// Journal is an open, locked decision journal. It is safe for concurrent
// use; appends are serialised.
type Journal struct {
	path string
	opts Options

	mu     sync.Mutex
	f      *os.File
	next   uint64            // seq of the next record
	last   receipt.ContentID // hash of the last line; meaningful when next > 0
	size   int64             // bytes of whole records
	state  state
	failed error // latched by an append that could not be made durable
}

// state is what the structural rules need of the records so far.
type state struct {
	open       map[uint64]bool // authorisations awaiting their debit
	nextSealed uint64          // the sequence the next sealed receipt takes
}

// apply checks r against the records before it and takes it in.
func (s *state) apply(r *Record) error {
	e := &r.Entry
	switch {
	case e.Authorised != nil:
		s.open[r.Seq] = true
	case e.Debited != nil:
		if !s.open[e.Debited.Auth] {
			return fmt.Errorf("%w: record %d is not an authorisation awaiting its debit", ErrOrphanDebit, e.Debited.Auth)
		}
		delete(s.open, e.Debited.Auth)
	case e.Sealed != nil:
		if e.Sealed.Sequence != s.nextSealed {
			return fmt.Errorf("%w: receipt %d sealed where receipt %d comes next", ErrOutOfSequence, e.Sealed.Sequence, s.nextSealed)
		}
		s.nextSealed++
	}
	return nil
}

// Open opens the journal at path, creating it (and its directory, 0700)
// when it does not exist, and takes the exclusive lock, which it holds
// until Close or the process ends. It verifies every record (see the
// package comment) and drops a final line cut short. It fails with
// ErrLocked where another steward holds the journal, ErrNoLock where the
// platform cannot lock it, and a *RecordError naming the record where the
// journal is not one a steward produced.
func Open(path string, opts Options) (*Journal, error) {
	dir := filepath.Dir(path)
	missing := 0 // directories MkdirAll is about to create
	for d := dir; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing++
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := lock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s", err, path)
	}
	// The file's entry in its directory, and each directory created here
	// in its parent, must be durable before any record is: a crash must
	// not lose the journal by losing the name that leads to it.
	for i, d := 0, dir; i <= missing; i, d = i+1, filepath.Dir(d) {
		if err := syncDir(d); err != nil {
			f.Close()
			return nil, fmt.Errorf("journal: sync directory %s: %w", d, err)
		}
	}
	j := &Journal{path: path, opts: opts, f: f, state: state{open: map[uint64]bool{}}}
	if err := j.scan(); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// scan verifies every whole record, leaves j positioned after the last,
// and cuts off a torn final line.
func (j *Journal) scan() error {
	var torn bool
	err := j.each(-1, func(r *Record) error {
		return j.state.apply(r)
	}, func(r *Record, line []byte) {
		j.next, j.last, j.size = r.Seq+1, r.Hash, j.size+int64(len(line))+1
	}, &torn)
	if err != nil {
		return err
	}
	if torn {
		// An append cut short (§2.2): never synced as a whole, so never
		// acted on. Cut it so the next append starts a clean line.
		if err := j.f.Truncate(j.size); err != nil {
			return fmt.Errorf("journal %s: drop the torn final line: %w", j.path, err)
		}
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("journal %s: %w", j.path, err)
		}
	}
	return nil
}

// each reads the records from the start of the file up to limit bytes
// (all when negative), checking that they chain, and calls fn with each.
// after, when set, is called with each record that passed. A final
// segment without a newline sets *torn.
func (j *Journal) each(limit int64, fn func(*Record) error, after func(*Record, []byte), torn *bool) error {
	var src io.Reader = io.NewSectionReader(j.f, 0, 1<<62)
	if limit >= 0 {
		src = io.NewSectionReader(j.f, 0, limit)
	}
	br := bufio.NewReaderSize(src, 64<<10)
	var (
		seq  uint64
		prev *receipt.ContentID
	)
	for {
		line, err := readLine(br)
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, errTorn) {
			if torn != nil {
				*torn = true
			}
			return nil
		}
		fail := func(err error) error { return &RecordError{Path: j.path, Seq: seq, Err: err} }
		if err != nil {
			return fail(err)
		}
		r, err := DecodeRecord(line)
		if err != nil {
			return fail(err)
		}
		switch {
		case r.Seq != seq:
			return fail(fmt.Errorf("%w: seq %d where %d comes next", ErrBrokenChain, r.Seq, seq))
		case (r.Prev == nil) != (seq == 0) || r.Prev != nil && *r.Prev != *prev:
			return fail(fmt.Errorf("%w: prev is not the hash of record %d", ErrBrokenChain, int64(seq)-1))
		}
		if err := fn(&r); err != nil {
			return fail(err)
		}
		if after != nil {
			after(&r, line)
		}
		seq, prev = r.Seq+1, &r.Hash
	}
}

// errTorn marks a final line with no newline.
var errTorn = errors.New("torn final line")

// readLine returns the next line without its newline: io.EOF at a clean
// end, errTorn for a final segment without a newline, ErrCorrupt for a
// line over MaxLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine+1 {
			if err != nil { // skip to the line's end, if it has one
				if _, err := br.ReadBytes('\n'); err != nil {
					return nil, errTorn // an over-long tail never completed
				}
			}
			return nil, fmt.Errorf("%w: line over %d bytes", ErrCorrupt, MaxLine)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, errTorn
		default:
			return nil, fmt.Errorf("journal: read: %w", err)
		}
	}
}

// Replay calls fn with every record, in order, from the start. Open has
// verified them; fn gives them their meaning. An error from fn comes back
// as a *RecordError wrapping ErrReplay and fn's error.
func (j *Journal) Replay(fn func(Record) error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return ErrClosed
	}
	return j.each(j.size, func(r *Record) error {
		if err := fn(*r); err != nil {
			return fmt.Errorf("%w: %w", ErrReplay, err)
		}
		return nil
	}, nil, nil)
}

// Append writes e as the next record and syncs it before returning. A
// record the journal's rules refuse (a debit with no authorisation
// awaiting it, a receipt out of sequence, an entry over the line bound) is
// not written. A write that fails is cut back off the file; a sync that
// fails leaves the record's durability unknown, so the journal then takes
// no more records (ErrFailed) until it is reopened.
func (j *Journal) Append(e Entry) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.f == nil:
		return Record{}, ErrClosed
	case j.failed != nil:
		return Record{}, fmt.Errorf("%w (%v)", ErrFailed, j.failed)
	}
	var prev *receipt.ContentID
	if j.next > 0 {
		last := j.last
		prev = &last
	}
	line, err := encodeRecord(j.next, prev, e)
	if err != nil {
		return Record{}, fmt.Errorf("journal: record %d: %w", j.next, err)
	}
	r := Record{Seq: j.next, Prev: prev, Entry: e, Hash: receipt.Sum(line)}
	trial := j.state.clone()
	if err := trial.apply(&r); err != nil {
		return Record{}, fmt.Errorf("journal: record %d: %w", j.next, err)
	}
	buf := append(bytes.Clone(line), '\n')
	if _, err := j.f.Write(buf); err != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			j.failed = fmt.Errorf("write: %v; cutting it back: %v", err, terr)
		}
		return Record{}, fmt.Errorf("journal: append record %d: %w", j.next, err)
	}
	if err := j.f.Sync(); err != nil {
		j.failed = fmt.Errorf("sync: %v", err)
		return Record{}, fmt.Errorf("journal: sync record %d: %w", j.next, err)
	}
	j.state = trial
	j.next, j.last, j.size = r.Seq+1, r.Hash, j.size+int64(len(buf))
	if j.opts.AfterAppend != nil {
		j.opts.AfterAppend(r)
	}
	return r, nil
}

func (s *state) clone() state {
	c := state{open: make(map[uint64]bool, len(s.open)+1), nextSealed: s.nextSealed}
	for k, v := range s.open {
		c.open[k] = v
	}
	return c
}

// Len returns how many records the journal holds.
func (j *Journal) Len() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next
}

// Size returns the journal's length in bytes.
func (j *Journal) Size() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size
}

// Path returns the journal's file path.
func (j *Journal) Path() string { return j.path }

// Close releases the lock and the file.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// syncDir makes the entries of directory dir durable. Where the platform
// or file system cannot sync a directory there is nothing more to do; any
// other failure is returned. A variable so that a test can see which
// directories Open syncs.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
