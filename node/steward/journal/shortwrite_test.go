//go:build linux || darwin

package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestShortWrite: an append the file system cuts short (here the file
// size limit, as a full disk would) leaves no partial record behind; the
// journal stays usable, and a reopen finds every whole record.
func TestShortWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j := open(t, path)
	appendAll(t, j, authorised(0))
	size := j.Size()

	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Skipf("no file size limit here: %v", err)
	}
	limit := old
	limit.Cur = uint64(size) + 10 // room for ten bytes of the next record
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &limit); err != nil {
		t.Skipf("cannot set the file size limit: %v", err)
	}
	restore := func() {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
			t.Fatal(err)
		}
	}
	defer restore()

	_, err := j.Append(debited(0, 7))
	if !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("append past the limit: %v, want EFBIG", err)
	}
	if st, _ := os.Stat(path); st.Size() != size || j.Size() != size || j.Len() != 1 {
		t.Fatalf("after a short write: file %d bytes, journal %d bytes and %d records; want %d bytes, 1 record", st.Size(), j.Size(), j.Len(), size)
	}
	restore()
	// Not latched: the bytes were cut back off, so the file is whole.
	appendAll(t, j, debited(0, 7), sealed(0))
	j.Close()
	raw, _ := os.ReadFile(path)
	j = open(t, path)
	if recs := replayAll(t, j); len(recs) != 3 || bytes.Count(raw, []byte("\n")) != 3 {
		t.Fatalf("reopened: %d records, %d lines", len(recs), bytes.Count(raw, []byte("\n")))
	}
}
