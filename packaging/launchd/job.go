package launchd

import (
	"path/filepath"
	"strconv"
	"time"
)

// Label names the job to launchd (reverse-DNS, as launchd expects).
const Label = "io.meshnode.meshnode"

// Scope is where the job runs.
type Scope int

const (
	// UserAgent runs while its user is logged in, in the user's GUI
	// session: ~/Library/LaunchAgents.
	UserAgent Scope = iota
	// SystemDaemon runs from boot, as the account it names:
	// /Library/LaunchDaemons. Installing one needs root.
	SystemDaemon
)

func (s Scope) String() string {
	if s == SystemDaemon {
		return "system daemon"
	}
	return "user agent"
}

// Account is the user the node runs as. Its home holds the node's state
// in both scopes, so moving between them keeps the node's identity.
type Account struct {
	Name string
	UID  int
	GID  int
	Home string
}

// Layout is where one installation's files live.
type Layout struct {
	Scope   Scope
	Account Account
	// Plist is the job's property list.
	Plist string
	// StateDir holds the node key, journal, config and models: the
	// account's ~/Library/Application Support/meshnode, the node's default
	// on macOS.
	StateDir string
	// LogFile receives the node's stdout and stderr.
	LogFile string
}

// NewLayout says where a job of the given scope for acct lives.
func NewLayout(scope Scope, acct Account) Layout {
	l := Layout{
		Scope:    scope,
		Account:  acct,
		StateDir: filepath.Join(acct.Home, "Library", "Application Support", "meshnode"),
		LogFile:  filepath.Join(acct.Home, "Library", "Logs", "meshnode", "meshnode.log"),
	}
	if scope == SystemDaemon {
		l.Plist = filepath.Join("/Library", "LaunchDaemons", Label+".plist")
	} else {
		l.Plist = filepath.Join(acct.Home, "Library", "LaunchAgents", Label+".plist")
	}
	return l
}

// Domain is the launchctl domain the job is bootstrapped into: the user's
// GUI session, or the system.
func (l Layout) Domain() string {
	if l.Scope == SystemDaemon {
		return "system"
	}
	return "gui/" + strconv.Itoa(l.Account.UID)
}

// Target is the launchctl service target: domain/label.
func (l Layout) Target() string { return l.Domain() + "/" + Label }

// Timings of the job.
const (
	// ExitTimeOut is how long launchd waits after SIGTERM before SIGKILL.
	// Its default (20 s) is shorter than the node's drain (drain_timeout,
	// 30 s by default).
	ExitTimeOut = 45 * time.Second
	// ThrottleInterval is the least time between two launches: a node that
	// keeps crashing is restarted at most this often.
	ThrottleInterval = 10 * time.Second
)

// Render renders the job's property list for the binary at exe.
func (l Layout) Render(exe string) ([]byte, error) {
	job := dict{
		{"Label", Label},
		{"ProgramArguments", []string{exe, "--state-dir", l.StateDir}},
		// The node finds its config (~/Library/Application Support/
		// meshnode/config.toml) from HOME, which a daemon is not given.
		{"EnvironmentVariables", map[string]string{"HOME": l.Account.Home}},
		{"WorkingDirectory", l.StateDir},
		{"RunAtLoad", true},
		// Restart after a crash or a failed exit; a clean exit (SIGTERM from
		// launchctl bootout or kill) stays down.
		{"KeepAlive", dict{{"Crashed", true}, {"SuccessfulExit", false}}},
		{"ThrottleInterval", int(ThrottleInterval / time.Second)},
		{"ExitTimeOut", int(ExitTimeOut / time.Second)},
		// Standard: no resource throttling. Background would cap its CPU and
		// I/O, slowing every answer; Interactive is for apps with a UI.
		{"ProcessType", "Standard"},
		// Files it creates (the node key first) are private: umask 077.
		{"Umask", 0o077},
		{"StandardOutPath", l.LogFile},
		{"StandardErrorPath", l.LogFile},
	}
	if l.Scope == SystemDaemon {
		// Never root: the account's primary group goes with it.
		job = append(job, entry{"UserName", l.Account.Name})
	}
	return encodePlist(job)
}
