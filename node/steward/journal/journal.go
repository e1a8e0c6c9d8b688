package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
)

// Options tune a journal.
type Options struct {
	// AfterAppend, when set, is called with every record once it is
	// durable, before Append returns. The crash tests use it to report
	// progress; it must not call back into the journal.
	AfterAppend func(Record)
	// OnSync, when set, is told how long each fsync of an append took:
	// of the journal's record ("journal") and of its checkpoint
	// ("checkpoint"). It runs under the journal's lock and must be quick.
	OnSync func(file string, took time.Duration)
	// Logger hears what Open repaired or set up on its own: a torn final
	// line dropped, a checkpoint created for a journal that had none, a
	// checkpoint advanced over records appended just before a crash. Nil
	// discards.
	Logger *slog.Logger
}

// Journal is an open, locked decision journal. It is safe for concurrent
// use; appends are serialised.
type Journal struct {
	path string
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	f      *os.File
	head   *headFile         // the checkpoint, advanced after each append
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
// package comment), checks the journal against its checkpoint
// ([HeadPath]), and drops a final line cut short. It fails with
// ErrLocked where another steward holds the journal, ErrNoLock where the
// platform cannot lock it, a *RecordError naming the record where the
// journal is not one a steward produced, a *RollbackError where it is
// shorter than, or different from, what its checkpoint says was written,
// and ErrBadCheckpoint where the checkpoint cannot be read. A journal with
// no checkpoint (one written before checkpoints existed, or a new one) is
// given one.
func Open(path string, opts Options) (*Journal, error) {
	j, missing, err := openLocked(path, opts)
	if err != nil {
		return nil, err
	}
	if err := j.open(missing); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// Acceptance is what AcceptRollback did.
type Acceptance struct {
	// Journal is the journal as it stands, which the checkpoint now names.
	Journal Checkpoint
	// Was is the checkpoint replaced; nil when there was none or it could
	// not be read (WasErr says why).
	Was    *Checkpoint
	WasErr error
	// Changed is false when the checkpoint already agreed with the
	// journal and nothing was written.
	Changed bool
}

// AcceptRollback is the operator's decision to serve from the journal at
// path as it stands, after Open refused it as rolled back (or its
// checkpoint as unreadable): it re-anchors the checkpoint to the
// journal's last whole record. Receipt sequences and grant presentations
// held only by records the journal lost may then be used again. It takes
// the journal's lock, so it fails with ErrLocked while a steward runs,
// and it verifies the records as Open does: a journal that is not one a
// steward produced stays refused (*RecordError). A journal that does not
// exist is created empty. The journal itself is not modified.
func AcceptRollback(path string, opts Options) (Acceptance, error) {
	j, missing, err := openLocked(path, opts)
	if err != nil {
		return Acceptance{}, err
	}
	defer j.Close()
	var acc Acceptance
	hpath := HeadPath(path)
	head, cp, err := openHead(hpath)
	switch {
	case err != nil:
		acc.WasErr = err
	case head != nil:
		acc.Was = &cp
		head.close()
	}
	at, _, err := j.scan(cp.Records)
	if err != nil {
		return Acceptance{}, err
	}
	acc.Journal = j.checkpoint()
	if acc.Was != nil && acc.Journal.Records >= cp.Records && (cp.Records == 0 || at == cp.Head) {
		return acc, nil // Open accepts this journal as it is
	}
	if j.head, err = createHead(hpath, acc.Journal); err != nil {
		return Acceptance{}, fmt.Errorf("journal %s: %w", path, err)
	}
	for i, d := 0, filepath.Dir(path); i <= missing; i, d = i+1, filepath.Dir(d) {
		if err := syncDir(d); err != nil {
			return Acceptance{}, fmt.Errorf("journal: sync directory %s: %w", d, err)
		}
	}
	acc.Changed = true
	j.log.Warn("journal: the operator accepted the journal as it stands; its checkpoint now names its last record",
		"journal", path, "checkpoint", hpath, "records", acc.Journal.Records, "was", acc.Was)
	return acc, nil
}

// openLocked opens (creating) the journal file and takes its lock. It
// returns how many directories above the file it created.
func openLocked(path string, opts Options) (*Journal, int, error) {
	dir := filepath.Dir(path)
	missing := 0 // directories MkdirAll is about to create
	for d := dir; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing++
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("journal: %w", err)
	}
	if err := lock(f); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s", err, path)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Journal{path: path, opts: opts, log: log, f: f, state: state{open: map[uint64]bool{}}}, missing, nil
}

func (j *Journal) open(missing int) error {
	hpath := HeadPath(j.path)
	head, cp, err := openHead(hpath)
	if errors.Is(err, ErrBadCheckpoint) {
		return fmt.Errorf("journal %s: %w; the steward will not serve from a journal it cannot check: if the journal is the one to keep, accept it as it stands to write a new checkpoint", j.path, err)
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	j.head = head
	at, torn, err := j.scan(cp.Records)
	if err != nil {
		return err
	}
	now := j.checkpoint()
	if head != nil && (now.Records < cp.Records || cp.Records > 0 && at != cp.Head) {
		return &RollbackError{Path: j.path, Journal: now, TornBytes: torn, CheckpointPath: hpath, Checkpoint: cp}
	}
	if torn > 0 {
		// An append cut short (§2.2): never synced as a whole, so never
		// acted on. Cut it so the next append starts a clean line, and
		// say so: bytes vanishing from the journal is worth a look.
		if err := j.f.Truncate(j.size); err != nil {
			return fmt.Errorf("journal %s: drop the torn final line: %w", j.path, err)
		}
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("journal %s: %w", j.path, err)
		}
		j.log.Warn("journal: dropped a torn final line, an append cut short by a crash or a full disk",
			"journal", j.path, "record", now.Records, "bytes", torn)
	}
	switch {
	case head == nil:
		if j.head, err = createHead(hpath, now); err != nil {
			return fmt.Errorf("journal %s: %w", j.path, err)
		}
		if now.Records > 0 {
			j.log.Warn("journal: created a chain-head checkpoint for a journal that had none; from now on a journal cut short or replaced is refused",
				"journal", j.path, "checkpoint", hpath, "records", now.Records, "bytes", now.Size)
		}
	case now.Records > cp.Records:
		// Records made durable just before a crash, whose checkpoint
		// was not: the journal may run ahead of its checkpoint, never
		// behind.
		if err := j.head.store(now, (*os.File).Sync); err != nil {
			return fmt.Errorf("journal %s: advance the checkpoint %s: %w", j.path, hpath, err)
		}
		j.log.Warn("journal: advanced the checkpoint over records appended just before the steward stopped",
			"journal", j.path, "checkpoint", hpath, "from_records", cp.Records, "to_records", now.Records)
	}
	// The journal's entry in its directory, and each directory created
	// here in its parent, must be durable before any record is: a crash
	// must not lose the journal by losing the name that leads to it. The
	// same sync covers a checkpoint file created above.
	for i, d := 0, filepath.Dir(j.path); i <= missing; i, d = i+1, filepath.Dir(d) {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("journal: sync directory %s: %w", d, err)
		}
	}
	return nil
}

// checkpoint is the journal's head as it stands.
func (j *Journal) checkpoint() Checkpoint {
	c := Checkpoint{Records: j.next, Size: j.size}
	if j.next > 0 {
		c.Head = j.last
	}
	return c
}

// scan verifies every whole record and leaves j positioned after the
// last. It returns the hash of record at-1 (when the journal reaches it)
// and the length of a torn final line, which it leaves in place.
func (j *Journal) scan(at uint64) (receipt.ContentID, int64, error) {
	var (
		torn bool
		hash receipt.ContentID
	)
	err := j.each(-1, func(r *Record) error {
		return j.state.apply(r)
	}, func(r *Record, line []byte) {
		j.next, j.last, j.size = r.Seq+1, r.Hash, j.size+int64(len(line))+1
		if r.Seq+1 == at {
			hash = r.Hash
		}
	}, &torn)
	if err != nil {
		return hash, 0, err
	}
	var tornBytes int64
	if torn {
		st, err := j.f.Stat()
		if err != nil {
			return hash, 0, fmt.Errorf("journal %s: %w", j.path, err)
		}
		tornBytes = st.Size() - j.size
	}
	return hash, tornBytes, nil
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
			// Skip to the line's end, if it has one, without keeping
			// what is skipped: a damaged line can be any length.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return nil, errTorn // an over-long tail never completed
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

// Append writes e as the next record, syncs it, then advances the
// checkpoint, before returning. A record the journal's rules refuse (a
// debit with no authorisation awaiting it, a receipt out of sequence, an
// entry over the line bound) is not written. A write that fails is cut
// back off the file; a sync that fails leaves the record's durability
// unknown, and a checkpoint that cannot be written leaves the journal
// unguarded, so after either the journal takes no more records
// (ErrFailed) until it is reopened.
func (j *Journal) Append(e Entry) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r, err := j.appendRecord(e)
	if err != nil {
		return Record{}, err
	}
	if err := j.head.store(j.checkpoint(), func(f *os.File) error { return j.sync("checkpoint", f) }); err != nil {
		// The record is durable and a reopen replays it; the checkpoint
		// behind it is one a reopen accepts.
		j.failed = fmt.Errorf("checkpoint: %v", err)
		return Record{}, fmt.Errorf("journal: record %d is written but the checkpoint %s could not be advanced: %w", r.Seq, j.head.path, err)
	}
	if j.opts.AfterAppend != nil {
		j.opts.AfterAppend(r)
	}
	return r, nil
}

// appendRecord writes and syncs the record for e, without the checkpoint.
func (j *Journal) appendRecord(e Entry) (Record, error) {
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
	if err := j.sync("journal", j.f); err != nil {
		j.failed = fmt.Errorf("sync: %v", err)
		return Record{}, fmt.Errorf("journal: sync record %d: %w", j.next, err)
	}
	j.state = trial
	j.next, j.last, j.size = r.Seq+1, r.Hash, j.size+int64(len(buf))
	return r, nil
}

// sync syncs f, telling Options.OnSync how long it took.
func (j *Journal) sync(file string, f *os.File) error {
	if j.opts.OnSync == nil {
		return f.Sync()
	}
	start := time.Now()
	err := f.Sync()
	j.opts.OnSync(file, time.Since(start))
	return err
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
	err := errors.Join(j.f.Close(), j.head.close())
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
