package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
)

// Kind is what a path is to the node, which sets what others may do to it.
type Kind uint8

const (
	// Dir is a directory of state: others may list it, not write it,
	// since whoever can write it can replace any file in it.
	Dir Kind = iota + 1
	// File is a file the node trusts: others may read it, not write it.
	File
	// Secret is a credential: others may neither read nor write it.
	Secret
)

func (k Kind) String() string {
	switch k {
	case Dir:
		return "directory"
	case File:
		return "file"
	case Secret:
		return "secret"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// mask is the permission bits others must not hold.
func (k Kind) mask() fs.FileMode {
	if k == Secret {
		return 0o077
	}
	return 0o022
}

// Item is one path to check.
type Item struct {
	Path string
	Kind Kind
}

// Sentinel errors, each wrapped by an *InsecureError.
var (
	// ErrPermissions: group or others can write the path (or, for a
	// secret, read it).
	ErrPermissions = errors.New("statedir: other users have access")
	// ErrOwner: the path belongs to a user other than the node's and
	// root, who can change its mode and contents at will.
	ErrOwner = errors.New("statedir: owned by another user")
)

// InsecureError is one path others could change, with the command that
// fixes it.
type InsecureError struct {
	Path string
	Kind Kind
	Mode fs.FileMode // permission bits
	// Owner is the path's owner (-1 where the system has no owners); Self
	// is the user the node runs as.
	Owner, Self int
	// Fix is the shell command that puts it right.
	Fix string
	Err error // ErrPermissions or ErrOwner
}

func (e *InsecureError) Error() string {
	var what string
	if errors.Is(e.Err, ErrOwner) {
		what = fmt.Sprintf("is owned by %s, not by %s that meshnode runs as, nor root: that user could replace it", userName(e.Owner), userName(e.Self))
	} else {
		access := "write"
		if e.Kind == Secret {
			access = "read or write"
		}
		what = fmt.Sprintf("has mode %04o: group or others can %s it", e.Mode, access)
	}
	advice := ""
	if e.Kind != Dir {
		advice = " (if you did not put it there, remove it and find out who did)"
		if e.Kind == Secret && !errors.Is(e.Err, ErrOwner) {
			advice = " (and check who could have read it)"
		}
	}
	return fmt.Sprintf("%s %s %s; run `%s`%s", e.Kind, e.Path, what, e.Fix, advice)
}

func (e *InsecureError) Unwrap() error { return e.Err }

// Check checks every item that exists (a missing path is the node's to
// create, with modes that pass) and returns one *InsecureError for each
// problem found, joined, so that one start lists every fix. A path that
// cannot be examined fails the check too.
func Check(items ...Item) error {
	return check(os.Geteuid(), items)
}

func check(self int, items []Item) error {
	var errs []error
	for _, it := range items {
		fi, err := os.Stat(it.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("statedir: %w", err))
			continue
		}
		perm := fi.Mode().Perm()
		uid, known := owner(fi)
		if !known {
			uid = -1
		}
		if bad := perm & it.Kind.mask(); bad != 0 {
			errs = append(errs, &InsecureError{Path: it.Path, Kind: it.Kind, Mode: perm, Owner: uid, Self: self,
				Fix: fmt.Sprintf("chmod %o %s", perm&^bad, it.Path), Err: ErrPermissions})
		}
		// Root owns what packages install (/etc/meshnode/config.toml), and
		// can change anything anyway.
		if known && self >= 0 && uid != self && uid != 0 {
			errs = append(errs, &InsecureError{Path: it.Path, Kind: it.Kind, Mode: perm, Owner: uid, Self: self,
				Fix: fmt.Sprintf("chown %s %s", chownName(self), it.Path), Err: ErrOwner})
		}
	}
	return errors.Join(errs...)
}

// userName is "uid N (name)", or "uid N" where the name is unknown.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// chownName is how chown names uid: by name where it has one.
func chownName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(uid)
}
