package node

import (
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
)

// DefaultStateDir is where the node keeps its key, journal and tokens when
// neither a flag nor the config names a place (DESIGN.md): systemd's
// $STATE_DIRECTORY for the service, ~/Library/Application Support/meshnode
// on macOS, and $XDG_STATE_HOME/meshnode (~/.local/state/meshnode) for a
// user's run elsewhere.
func DefaultStateDir() string {
	return defaultStateDir(os.Getenv, runtime.GOOS, os.UserHomeDir, isServiceUser())
}

// Where the Linux packages put the service's files.
const (
	ServiceStateDir  = "/var/lib/meshnode"
	serviceConfigDir = "/etc/meshnode"
)

// isServiceUser reports whether this process runs as the packages'
// meshnode user, so that `sudo -u meshnode meshnode id` finds the
// service's state without being told where it is.
func isServiceUser() bool {
	u, err := user.Current()
	return err == nil && u.Username == "meshnode" && runtime.GOOS == "linux"
}

func defaultStateDir(getenv func(string) string, goos string, home func() (string, error), service bool) string {
	if d := getenv("STATE_DIRECTORY"); d != "" {
		// systemd may pass several, colon-separated; ours is the first.
		d, _, _ = strings.Cut(d, ":")
		return d
	}
	if service {
		return ServiceStateDir
	}
	h, err := home()
	if err != nil || h == "" {
		return filepath.Join(os.TempDir(), "meshnode")
	}
	if goos == "darwin" {
		return filepath.Join(h, "Library", "Application Support", "meshnode")
	}
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "meshnode")
	}
	return filepath.Join(h, ".local", "state", "meshnode")
}
