package journal

import (
	"errors"
	"fmt"
)

// Sentinel errors. A journal that fails to open because of what it holds
// returns a *RecordError naming the record, wrapping one of these.
var (
	// ErrLocked: another process (or another Open in this one) holds the
	// journal. One steward per journal (§2.2).
	ErrLocked = errors.New("journal: another steward holds this journal")
	// ErrNoLock: the platform cannot lock the journal exclusively, so no
	// steward may serve from it (§2.2).
	ErrNoLock = errors.New("journal: this platform cannot take an exclusive lock on the journal")
	// ErrCorrupt: a line that is not a well-formed record.
	ErrCorrupt = errors.New("journal: corrupt record")
	// ErrBrokenChain: a record whose seq or prev does not follow the one
	// before it.
	ErrBrokenChain = errors.New("journal: records do not form one chain")
	// ErrOrphanDebit: a debit with no authorisation awaiting it.
	ErrOrphanDebit = errors.New("journal: debit with no authorisation")
	// ErrOutOfSequence: a receipt sealed out of sequence.
	ErrOutOfSequence = errors.New("journal: receipt out of sequence")
	// ErrReplay: the steward refused a record when replaying it (wrapped
	// with the steward's reason, such as a presentation spent twice).
	ErrReplay = errors.New("journal: the steward refuses a record on replay")
	// ErrFailed: an earlier append could not be made durable, so the
	// journal takes no more; reopen it (after a restart) to continue.
	ErrFailed = errors.New("journal: an earlier append failed; the journal takes no more records")
	// ErrClosed: the journal is closed.
	ErrClosed = errors.New("journal: closed")
)

// RecordError names the record a journal was refused at. A steward MUST
// NOT serve from such a journal (§2.2).
type RecordError struct {
	Path string
	// Seq is the record's seq, which is also its line number less one.
	Seq uint64
	Err error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("journal %s: record %d (line %d): %v; the steward will not serve from this journal", e.Path, e.Seq, e.Seq+1, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }
