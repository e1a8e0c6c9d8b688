package gguf

import (
	"errors"
	"fmt"
)

// Sentinel errors, matched with errors.Is on what Open and Parse return.
var (
	// ErrNotGGUF: the file does not start with the GGUF magic.
	ErrNotGGUF = errors.New("not a GGUF file")
	// ErrVersion: a GGUF version this reader does not read (v1, big-endian,
	// or newer than v3).
	ErrVersion = errors.New("unsupported GGUF version")
	// ErrTruncated: the file ends before something it declares, or a length
	// it declares runs past its end.
	ErrTruncated = errors.New("truncated GGUF file")
	// ErrCorrupt: a value that cannot be right (bad type tag, duplicate key,
	// misaligned tensor, impossible shape, ...).
	ErrCorrupt = errors.New("corrupt GGUF file")
	// ErrClosed: the File's mapping has been released.
	ErrClosed = errors.New("gguf: file is closed")
	// ErrShape: a tensor is not the shape its loader needs
	// (File.TensorShaped).
	ErrShape = errors.New("gguf: tensor shape")
)

// FormatError says what is wrong with a file and where.
type FormatError struct {
	Offset int64  // byte offset in the file at which the problem was found
	Where  string // the part being read, e.g. `metadata key 4 "general.name"`
	Detail string // what is wrong
	Err    error  // ErrNotGGUF, ErrVersion, ErrTruncated or ErrCorrupt
}

func (e *FormatError) Error() string {
	if e.Where == "" {
		return fmt.Sprintf("gguf: offset %d: %s", e.Offset, e.Detail)
	}
	return fmt.Sprintf("gguf: %s at offset %d: %s", e.Where, e.Offset, e.Detail)
}

func (e *FormatError) Unwrap() error { return e.Err }

var errEmptyKey = errors.New("gguf: empty metadata key")

type dupKeyError struct{ key string }

func (e *dupKeyError) Error() string { return fmt.Sprintf("gguf: duplicate metadata key %q", e.key) }
