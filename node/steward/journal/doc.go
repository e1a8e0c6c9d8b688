// Package journal is the steward's decision journal (mesh-spec §2.2): an
// append-only file of one JSON record per line, each record chained to the
// one before by the BLAKE3 hash of its line and synced before the append
// returns, held under an exclusive lock the operating system releases
// when the holding process dies.
//
// A record is {seq, prev, entry}: seq counts from 0, prev is the hash of
// the previous line (absent for the first), and entry is one of
//
//	authorised  a grant decided for a serve, before the engine runs
//	debited     the metered energy debited for an authorised serve
//	sealed      a receipt's sequence and envelope id, before it is handed out
//	change      a sealed change-record entry (§6.5)
//	witnessed   a receipt shown to the steward that the journal does not hold
//	revoked     a grant revocation, from when the steward learned it
//
// Opening a journal verifies that its records form one chain, that every
// debit belongs to an authorisation not yet debited, and that receipts
// are sealed in sequence from 0; a final line with no newline is an
// append cut short and is dropped (and logged). What a record means for
// grants is the steward's to replay ([Journal.Replay]).
//
// Records cut from the end leave a chain that is still whole, so the
// journal keeps a chain-head [Checkpoint] in a file of its own
// ([HeadPath]), advanced after every append. Open refuses a journal that
// falls short of its checkpoint or differs from it at the checkpoint's
// record (*RollbackError); it may run ahead, by records appended just
// before a crash. [AcceptRollback] is the operator's way to serve from
// such a journal all the same. The checkpoint lives on the same storage as
// the journal: it catches a journal cut, emptied, deleted or swapped on
// its own, not one rolled back together with its checkpoint, which only a
// receipt shown back to the steward can reveal (§2.2's witness).
package journal
