package launchd

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeLaunchctl keeps launchd's state: which targets are loaded and which
// domains exist. It records every call.
type fakeLaunchctl struct {
	domains map[string]bool
	loaded  map[string]string // target → plist path
	fail    string            // a verb that fails with exit 5
	calls   []string
}

func newFake(domains ...string) *fakeLaunchctl {
	f := &fakeLaunchctl{domains: map[string]bool{"system": true}, loaded: map[string]string{}}
	for _, d := range domains {
		f.domains[d] = true
	}
	return f
}

func (f *fakeLaunchctl) Run(_ context.Context, args ...string) ([]byte, int, error) {
	f.calls = append(f.calls, strings.Join(args, " "))
	if args[0] == f.fail {
		return []byte("Bootstrap failed: 5: Input/output error\n"), 5, nil
	}
	switch args[0] {
	case "print":
		if f.domains[args[1]] {
			return nil, 0, nil
		}
		if _, ok := f.loaded[args[1]]; ok {
			return nil, 0, nil
		}
		return []byte("Could not find service\n"), 113, nil
	case "enable":
		return nil, 0, nil
	case "bootstrap":
		if _, err := os.Stat(args[2]); err != nil {
			return []byte(err.Error()), 5, nil
		}
		f.loaded[args[1]+"/"+Label] = args[2]
		return nil, 0, nil
	case "bootout":
		if _, ok := f.loaded[args[1]]; !ok {
			return []byte("Boot-out failed: 3: No such process\n"), 3, nil
		}
		delete(f.loaded, args[1])
		return nil, 0, nil
	}
	return []byte("unknown subcommand"), 64, nil
}

type chownCall struct {
	path     string
	uid, gid int
}

func newInstaller(t *testing.T, scope Scope, lc Launchctl) (*Installer, *[]chownCall) {
	t.Helper()
	home := t.TempDir()
	acct := Account{Name: "alice", UID: 501, GID: 20, Home: home}
	in := NewInstaller(scope, acct, "/usr/local/bin/meshnode")
	in.Launchctl = lc
	// /Library is not ours to write in a test: the daemon's plist goes to
	// a temporary directory, and so does the other scope's.
	root := t.TempDir()
	if scope == SystemDaemon {
		in.Layout.Plist = filepath.Join(root, "LaunchDaemons", Label+".plist")
	} else {
		in.Other.Plist = filepath.Join(root, "LaunchDaemons", Label+".plist")
	}
	var chowns []chownCall
	in.Chown = func(path string, uid, gid int) error {
		chowns = append(chowns, chownCall{path, uid, gid})
		return nil
	}
	return in, &chowns
}

func TestInstallUserAgent(t *testing.T) {
	lc := newFake("gui/501")
	in, chowns := newInstaller(t, UserAgent, lc)
	ctx := context.Background()
	if err := in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	l := in.Layout
	want := []string{
		"print gui/501",
		"print gui/501/" + Label,
		"enable gui/501/" + Label,
		"bootstrap gui/501 " + l.Plist,
	}
	if !reflect.DeepEqual(lc.calls, want) {
		t.Errorf("launchctl calls\n%q\nwant\n%q", lc.calls, want)
	}
	got, err := os.ReadFile(l.Plist)
	if err != nil {
		t.Fatal(err)
	}
	rendered, _ := l.Render(in.Exe)
	if string(got) != string(rendered) {
		t.Errorf("installed plist differs from the rendered one")
	}
	modes := map[string]os.FileMode{l.Plist: 0o644, l.StateDir: 0o700 | os.ModeDir, filepath.Dir(l.LogFile): 0o755 | os.ModeDir}
	for path, mode := range modes {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", path, st.Mode(), mode)
		}
	}
	if len(*chowns) != 0 {
		t.Errorf("a user agent chowns nothing, got %v", *chowns)
	}
	if strings.HasPrefix(l.Plist, l.Account.Home+"/Library/LaunchAgents/") == false {
		t.Errorf("agent plist at %s", l.Plist)
	}

	// Installing again replaces the loaded job: bootout, then bootstrap.
	lc.calls = nil
	if err := in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"print gui/501",
		"print gui/501/" + Label,
		"bootout gui/501/" + Label,
		"enable gui/501/" + Label,
		"bootstrap gui/501 " + l.Plist,
	}
	if !reflect.DeepEqual(lc.calls, want) {
		t.Errorf("reinstall: launchctl calls\n%q\nwant\n%q", lc.calls, want)
	}
	if lc.loaded["gui/501/"+Label] != l.Plist {
		t.Errorf("not loaded after reinstall: %v", lc.loaded)
	}

	// Uninstall unloads and removes the plist, keeps the state; a second
	// uninstall finds nothing.
	if err := os.WriteFile(filepath.Join(l.StateDir, "node.key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := in.Uninstall(ctx)
	if err != nil || !removed {
		t.Fatalf("Uninstall = %v, %v", removed, err)
	}
	if _, ok := lc.loaded["gui/501/"+Label]; ok {
		t.Error("still loaded after uninstall")
	}
	if exists(l.Plist) {
		t.Error("plist still there after uninstall")
	}
	if !exists(filepath.Join(l.StateDir, "node.key")) {
		t.Error("uninstall removed the node's state")
	}
	removed, err = in.Uninstall(ctx)
	if err != nil || removed {
		t.Fatalf("second Uninstall = %v, %v; want false, nil", removed, err)
	}
}

func TestInstallSystemDaemon(t *testing.T) {
	lc := newFake() // no GUI session: a daemon does not need one
	in, chowns := newInstaller(t, SystemDaemon, lc)
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := in.Layout
	want := []string{
		"print system/" + Label,
		"enable system/" + Label,
		"bootstrap system " + l.Plist,
	}
	if !reflect.DeepEqual(lc.calls, want) {
		t.Errorf("launchctl calls\n%q\nwant\n%q", lc.calls, want)
	}
	wantChowns := []chownCall{{l.StateDir, 501, 20}, {filepath.Dir(l.LogFile), 501, 20}}
	if !reflect.DeepEqual(*chowns, wantChowns) {
		t.Errorf("chowns %v, want %v (the account's directories, not LaunchDaemons)", *chowns, wantChowns)
	}
	if NewLayout(SystemDaemon, l.Account).Plist != "/Library/LaunchDaemons/"+Label+".plist" {
		t.Errorf("daemon plist at %s", NewLayout(SystemDaemon, l.Account).Plist)
	}
}

func TestInstallRefuses(t *testing.T) {
	ctx := context.Background()

	t.Run("no GUI session", func(t *testing.T) {
		lc := newFake()
		in, _ := newInstaller(t, UserAgent, lc)
		if err := in.Install(ctx); !errors.Is(err, ErrNoGUISession) {
			t.Fatalf("err = %v, want ErrNoGUISession", err)
		}
		if exists(in.Layout.Plist) || exists(in.Layout.StateDir) {
			t.Error("a refused install changed files")
		}
	})

	t.Run("installed in the other scope", func(t *testing.T) {
		lc := newFake("gui/501")
		in, _ := newInstaller(t, UserAgent, lc)
		if err := os.MkdirAll(filepath.Dir(in.Other.Plist), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(in.Other.Plist, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := in.Install(ctx)
		if !errors.Is(err, ErrOtherScope) || !strings.Contains(err.Error(), "sudo meshnode service uninstall") {
			t.Fatalf("err = %v, want ErrOtherScope naming the sudo uninstall", err)
		}
		if len(lc.calls) != 0 {
			t.Errorf("launchctl called: %q", lc.calls)
		}
	})

	t.Run("relative binary", func(t *testing.T) {
		in, _ := newInstaller(t, UserAgent, newFake("gui/501"))
		in.Exe = "bin/meshnode"
		if err := in.Install(ctx); err == nil {
			t.Fatal("a relative binary path was accepted")
		}
	})

	t.Run("bootstrap fails", func(t *testing.T) {
		lc := newFake("gui/501")
		lc.fail = "bootstrap"
		in, _ := newInstaller(t, UserAgent, lc)
		err := in.Install(ctx)
		var le *LaunchctlError
		if !errors.As(err, &le) || le.Code != 5 || le.Args[0] != "bootstrap" || !strings.Contains(err.Error(), "Input/output error") {
			t.Fatalf("err = %v, want a LaunchctlError for bootstrap with its output", err)
		}
	})
}

func TestNewLayoutPaths(t *testing.T) {
	acct := Account{Name: "bob", UID: 502, GID: 20, Home: "/Users/bob"}
	for _, tc := range []struct {
		scope                          Scope
		plist, state, log, domain, tgt string
	}{
		{UserAgent, "/Users/bob/Library/LaunchAgents/io.meshnode.meshnode.plist",
			"/Users/bob/Library/Application Support/meshnode", "/Users/bob/Library/Logs/meshnode/meshnode.log",
			"gui/502", "gui/502/io.meshnode.meshnode"},
		{SystemDaemon, "/Library/LaunchDaemons/io.meshnode.meshnode.plist",
			"/Users/bob/Library/Application Support/meshnode", "/Users/bob/Library/Logs/meshnode/meshnode.log",
			"system", "system/io.meshnode.meshnode"},
	} {
		l := NewLayout(tc.scope, acct)
		got := [5]string{l.Plist, l.StateDir, l.LogFile, l.Domain(), l.Target()}
		want := [5]string{tc.plist, tc.state, tc.log, tc.domain, tc.tgt}
		if got != want {
			t.Errorf("%v: got %q, want %q", tc.scope, got, want)
		}
	}
}

func TestChooseScope(t *testing.T) {
	users := map[string]*user.User{
		"alice": {Username: "alice", Uid: "501", Gid: "20", HomeDir: "/Users/alice"},
		"root":  {Username: "root", Uid: "0", Gid: "0", HomeDir: "/var/root"},
		"ghost": {Username: "ghost", Uid: "600", Gid: "20", HomeDir: ""},
	}
	lookup := func(name, uid string) (*user.User, error) {
		for _, u := range users {
			if u.Username == name || name == "" && u.Uid == uid {
				return u, nil
			}
		}
		return nil, user.UnknownUserError(name)
	}
	alice := Account{Name: "alice", UID: 501, GID: 20, Home: "/Users/alice"}
	for _, tc := range []struct {
		name           string
		euid           int
		flag, sudoUser string
		scope          Scope
		acct           Account
		wantErr        error // nil: any error is a failure; errAny: any error
	}{
		{name: "user runs it", euid: 501, scope: UserAgent, acct: alice},
		{name: "sudo from alice", euid: 0, sudoUser: "alice", scope: SystemDaemon, acct: alice},
		{name: "root names alice", euid: 0, flag: "alice", scope: SystemDaemon, acct: alice},
		{name: "flag wins over sudo", euid: 0, flag: "alice", sudoUser: "ghost", scope: SystemDaemon, acct: alice},
		{name: "root without a name", euid: 0, wantErr: ErrNeedAccount},
		{name: "sudo from root", euid: 0, sudoUser: "root", wantErr: ErrNeedAccount},
		{name: "names a uid-0 account", euid: 0, flag: "root", wantErr: ErrNeedAccount},
		{name: "unknown account", euid: 0, flag: "nobody-here", wantErr: errAny},
		{name: "no home", euid: 0, flag: "ghost", wantErr: errAny},
		{name: "flag without root", euid: 501, flag: "alice", wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scope, acct, err := ChooseScope(tc.euid, tc.flag, tc.sudoUser, lookup)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err = %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && (scope != tc.scope || acct != tc.acct):
				t.Fatalf("got %v %+v, want %v %+v", scope, acct, tc.scope, tc.acct)
			}
		})
	}
}

var errAny = errors.New("any error")
