package launchd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Launchctl runs launchctl with args and reports its combined output and
// exit code; err is only for failing to run it at all. Tests use a fake.
type Launchctl interface {
	Run(ctx context.Context, args ...string) (out []byte, code int, err error)
}

// ExecLaunchctl runs /bin/launchctl.
type ExecLaunchctl struct{}

// Run implements [Launchctl].
func (ExecLaunchctl) Run(ctx context.Context, args ...string) ([]byte, int, error) {
	out, err := exec.CommandContext(ctx, "/bin/launchctl", args...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out, exit.ExitCode(), nil
	}
	if err != nil {
		return out, -1, fmt.Errorf("launchctl: %w", err)
	}
	return out, 0, nil
}

// Errors of Install and Uninstall.
var (
	// ErrOtherScope: the node is already installed in the other scope, and
	// two nodes cannot share one state directory.
	ErrOtherScope = errors.New("launchd: meshnode is installed in the other scope")
	// ErrNoGUISession: a user agent needs the user's GUI login session.
	ErrNoGUISession = errors.New("launchd: no GUI login session for a user agent")
)

// LaunchctlError is launchctl failing at one step.
type LaunchctlError struct {
	Args   []string
	Code   int
	Output string
}

func (e *LaunchctlError) Error() string {
	return fmt.Sprintf("launchctl %s: exit %d: %s", strings.Join(e.Args, " "), e.Code, strings.TrimSpace(e.Output))
}

// Installer installs and removes the job of one layout.
type Installer struct {
	Layout Layout
	// Other is the same account's layout in the other scope, checked so
	// that the node is never installed twice.
	Other Layout
	// Exe is the absolute path of the meshnode binary the job runs.
	Exe       string
	Launchctl Launchctl
	// Chown gives a path to a user; os.Lchown in production. Used only for
	// a system daemon, whose directories root creates for its account.
	Chown func(path string, uid, gid int) error
}

// NewInstaller manages acct's job of the given scope, running the binary at
// exe, through /bin/launchctl.
func NewInstaller(scope Scope, acct Account, exe string) *Installer {
	other := SystemDaemon
	if scope == SystemDaemon {
		other = UserAgent
	}
	return &Installer{
		Layout:    NewLayout(scope, acct),
		Other:     NewLayout(other, acct),
		Exe:       exe,
		Launchctl: ExecLaunchctl{},
		Chown:     os.Lchown,
	}
}

// Install writes the job's property list and loads it, replacing (and
// restarting) an installed one. The state directory is created and kept.
func (in *Installer) Install(ctx context.Context) error {
	l := in.Layout
	if !filepath.IsAbs(in.Exe) {
		return fmt.Errorf("launchd: the binary's path %q is not absolute", in.Exe)
	}
	if exists(in.Other.Plist) {
		return fmt.Errorf("%w: %s exists; remove it first (%s)", ErrOtherScope, in.Other.Plist, UninstallCommand(in.Other.Scope))
	}
	plist, err := l.Render(in.Exe)
	if err != nil {
		return err
	}
	if l.Scope == UserAgent {
		// Checked before anything changes: bootstrap into a missing GUI
		// domain fails only after the old job is gone.
		if _, code, err := in.Launchctl.Run(ctx, "print", l.Domain()); err != nil {
			return err
		} else if code != 0 {
			return fmt.Errorf("%w (%s): log in on the Mac's screen once, or install a system daemon with sudo, which also starts at boot", ErrNoGUISession, l.Domain())
		}
	}
	if err := in.mkdirs(); err != nil {
		return err
	}
	if err := in.unload(ctx); err != nil {
		return err
	}
	if err := writeAtomic(l.Plist, plist, 0o644); err != nil {
		return err
	}
	// A job once disabled (launchctl disable) refuses to bootstrap until it
	// is enabled again.
	if err := in.launchctl(ctx, "enable", l.Target()); err != nil {
		return err
	}
	return in.launchctl(ctx, "bootstrap", l.Domain(), l.Plist)
}

// Uninstall stops and unloads the job and removes its property list. It
// reports whether there was anything to remove. The node's state (its key,
// journal, config and models) and its log stay.
func (in *Installer) Uninstall(ctx context.Context) (bool, error) {
	loaded, err := in.loaded(ctx)
	if err != nil {
		return false, err
	}
	if loaded {
		if err := in.launchctl(ctx, "bootout", in.Layout.Target()); err != nil {
			return false, err
		}
	}
	err = os.Remove(in.Layout.Plist)
	if errors.Is(err, fs.ErrNotExist) {
		return loaded, nil
	}
	return true, err
}

func (in *Installer) mkdirs() error {
	l := in.Layout
	dirs := []struct {
		path string
		mode fs.FileMode
	}{
		{l.StateDir, 0o700},
		{filepath.Dir(l.LogFile), 0o755},
		{filepath.Dir(l.Plist), 0o755},
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("launchd: %w", err)
		}
		// A daemon's directories are made by root in the account's home:
		// hand them over (LaunchDaemons itself stays root's).
		if l.Scope == SystemDaemon && d.path != filepath.Dir(l.Plist) {
			if err := in.Chown(d.path, l.Account.UID, l.Account.GID); err != nil {
				return fmt.Errorf("launchd: %w", err)
			}
		}
	}
	return nil
}

// unload boots out a loaded job, which stops the node (it drains first).
func (in *Installer) unload(ctx context.Context) error {
	loaded, err := in.loaded(ctx)
	if err != nil || !loaded {
		return err
	}
	return in.launchctl(ctx, "bootout", in.Layout.Target())
}

func (in *Installer) loaded(ctx context.Context) (bool, error) {
	_, code, err := in.Launchctl.Run(ctx, "print", in.Layout.Target())
	return err == nil && code == 0, err
}

func (in *Installer) launchctl(ctx context.Context, args ...string) error {
	out, code, err := in.Launchctl.Run(ctx, args...)
	if err != nil {
		return err
	}
	if code != 0 {
		return &LaunchctlError{Args: args, Code: code, Output: string(out)}
	}
	return nil
}

// writeAtomic replaces path with data: launchd never reads half a file.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("launchd: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("launchd: %w", err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("launchd: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("launchd: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("launchd: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("launchd: %w", err)
	}
	return nil
}

// UninstallCommand is the command that removes a job of the given scope.
func UninstallCommand(s Scope) string {
	if s == SystemDaemon {
		return "sudo meshnode service uninstall"
	}
	return "meshnode service uninstall, without sudo"
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
