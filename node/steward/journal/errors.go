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
	// ErrRolledBack: the journal is shorter than its checkpoint says the
	// steward wrote, or differs from it: records were cut or the file was
	// replaced. Returned in a *RollbackError.
	ErrRolledBack = errors.New("journal: rolled back")
	// ErrBadCheckpoint: the checkpoint file beside the journal holds no
	// intact checkpoint, so the journal cannot be checked against it.
	ErrBadCheckpoint = errors.New("journal: checkpoint unreadable")
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

// RollbackError is a journal that does not reach its checkpoint: it holds
// fewer records than the steward had made durable, or the record at the
// checkpoint's position is not the one the steward wrote. Serving from it
// would hand out receipt sequences and honour presentations already used,
// so the steward refuses until an operator restores the journal or
// accepts it as it stands ([AcceptRollback]).
type RollbackError struct {
	Path string
	// Journal is the journal as it stands (whole records only).
	Journal Checkpoint
	// TornBytes is the length of a final line cut short, when there is one.
	TornBytes int64
	// CheckpointPath and Checkpoint are what the steward last recorded.
	CheckpointPath string
	Checkpoint     Checkpoint
}

func (e *RollbackError) Error() string {
	how := "it holds fewer records than the steward wrote (records were cut from its end, or it was emptied, deleted or replaced)"
	if e.Journal.Records >= e.Checkpoint.Records {
		how = fmt.Sprintf("record %d is not the one the steward wrote there, so the file was replaced", e.Checkpoint.Records-1)
	}
	torn := ""
	if e.TornBytes > 0 {
		torn = fmt.Sprintf(", and a torn final line of %d bytes", e.TornBytes)
	}
	return fmt.Sprintf("journal %s holds %s%s, but the checkpoint %s says the steward had written %s: %s; "+
		"the steward will not serve from this journal, since the receipt sequences and spent grant presentations of the missing records could be used again. "+
		"Restore the journal from a copy that holds those records, or accept the journal as it stands",
		e.Path, e.Journal, torn, e.CheckpointPath, e.Checkpoint, how)
}

func (e *RollbackError) Unwrap() error { return ErrRolledBack }
