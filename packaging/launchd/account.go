package launchd

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
)

// ErrNeedAccount: as root, the system daemon's account must be named; the
// node never runs as root.
var ErrNeedAccount = errors.New("launchd: name the account the node runs as")

// Lookup finds a user by name, or by uid when name is empty; user.Lookup
// and user.LookupId in production.
type Lookup func(name, uid string) (*user.User, error)

// SystemLookup looks users up in the system's directory.
func SystemLookup(name, uid string) (*user.User, error) {
	if name != "" {
		return user.Lookup(name)
	}
	return user.LookupId(uid)
}

// ChooseScope decides what `meshnode service` manages: a user agent for
// the calling user, or — run as root, as under sudo — a system daemon for
// the account named by name, else by sudoUser (the account sudo was run
// from). euid is the effective user id.
func ChooseScope(euid int, name, sudoUser string, lookup Lookup) (Scope, Account, error) {
	if euid != 0 {
		if name != "" {
			return 0, Account{}, fmt.Errorf("launchd: --user names a system daemon's account, and a system daemon needs root: run with sudo")
		}
		acct, err := account(lookup, "", strconv.Itoa(euid))
		return UserAgent, acct, err
	}
	if name == "" {
		name = sudoUser
	}
	if name == "" || name == "root" {
		return 0, Account{}, fmt.Errorf("%w: run sudo from that account, or pass --user NAME (not root)", ErrNeedAccount)
	}
	acct, err := account(lookup, name, "")
	if err == nil && acct.UID == 0 {
		err = fmt.Errorf("%w: %s is root", ErrNeedAccount, name)
	}
	return SystemDaemon, acct, err
}

func account(lookup Lookup, name, uid string) (Account, error) {
	u, err := lookup(name, uid)
	if err != nil {
		return Account{}, fmt.Errorf("launchd: %w", err)
	}
	a := Account{Name: u.Username, Home: u.HomeDir}
	if a.UID, err = strconv.Atoi(u.Uid); err != nil {
		return Account{}, fmt.Errorf("launchd: user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	if a.GID, err = strconv.Atoi(u.Gid); err != nil {
		return Account{}, fmt.Errorf("launchd: user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	if a.Home == "" || a.Home[0] != '/' {
		return Account{}, fmt.Errorf("launchd: user %s has no absolute home directory (%q)", u.Username, a.Home)
	}
	return a, nil
}
