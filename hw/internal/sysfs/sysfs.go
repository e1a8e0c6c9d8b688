// Package sysfs reads the small text attributes of Linux sysfs and procfs
// through an [fs.FS], so that tests can hand the hw counters a fake tree.
package sysfs

import (
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
)

// MaxAttr bounds one attribute: the kernel serves at most a page.
const MaxAttr = 4096

// ReadBytes reads a whole attribute of at most MaxAttr bytes.
func ReadBytes(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxAttr+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > MaxAttr {
		return nil, fmt.Errorf("read %s: longer than %d bytes", name, MaxAttr)
	}
	return b, nil
}

// ReadString reads an attribute with surrounding space and NULs trimmed
// (device-tree strings end in a NUL).
func ReadString(fsys fs.FS, name string) (string, error) {
	b, err := ReadBytes(fsys, name)
	if err != nil {
		return "", err
	}
	return strings.Trim(string(b), " \t\r\n\x00"), nil
}

// ReadUint reads an unsigned decimal attribute.
func ReadUint(fsys fs.FS, name string) (uint64, error) {
	s, err := ReadString(fsys, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// ReadInt reads a signed decimal attribute; a trailing unit word, as some
// drivers append ("32760 ma"), is ignored.
func ReadInt(fsys fs.FS, name string) (int64, error) {
	s, err := ReadString(fsys, name)
	if err != nil {
		return 0, err
	}
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		s = s[:i]
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}
