package packaging

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node"
)

// unitLine is one line of a systemd unit file.
type unitLine struct {
	n       int // 1-based
	section string
	key     string // empty for comments and blanks
	value   string
	comment string // the text of a comment line
}

func readUnit(t *testing.T, path string) []unitLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []unitLine
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		l := unitLine{n: n, section: section}
		switch {
		case s == "":
		case strings.HasPrefix(s, "#") || strings.HasPrefix(s, ";"):
			l.comment = strings.TrimSpace(strings.TrimLeft(s, "#;"))
		case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
			section = s[1 : len(s)-1]
			l.section = section
		default:
			k, v, ok := strings.Cut(s, "=")
			if !ok {
				t.Fatalf("%s:%d: not key=value: %q", path, n, s)
			}
			l.key, l.value = strings.TrimSpace(k), strings.TrimSpace(v)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// values is every value of section.key, in order.
func values(lines []unitLine, section, key string) []string {
	var vs []string
	for _, l := range lines {
		if l.section == section && l.key == key {
			vs = append(vs, l.value)
		}
	}
	return vs
}

// hardening is each sandbox setting the unit must have (issue: "every
// hardening setting that still lets it work, each commented").
var hardening = map[string][]string{
	"NoNewPrivileges":         {"yes"},
	"ProtectSystem":           {"strict"},
	"ProtectHome":             {"yes"},
	"PrivateTmp":              {"yes"},
	"CapabilityBoundingSet":   {""},
	"AmbientCapabilities":     {""},
	"RestrictAddressFamilies": {"AF_UNIX AF_INET AF_INET6 AF_NETLINK"},
	"SystemCallFilter":        {"@system-service", "~@privileged"},
	"SystemCallErrorNumber":   {"EPERM"},
	"SystemCallArchitectures": {"native"},
	"MemoryDenyWriteExecute":  {"yes"},
	"LockPersonality":         {"yes"},
	"RestrictNamespaces":      {"yes"},
	"RestrictRealtime":        {"yes"},
	"RestrictSUIDSGID":        {"yes"},
	"ProtectKernelTunables":   {"yes"},
	"ProtectKernelModules":    {"yes"},
	"ProtectKernelLogs":       {"yes"},
	"ProtectControlGroups":    {"yes"},
	"ProtectHostname":         {"yes"},
	"ProtectProc":             {"invisible"},
	"RemoveIPC":               {"yes"},
	"UMask":                   {"0077"},
}

// breaksTheNode are settings that would cut the node off from its GPU,
// its device groups or the /proc files it reads (the unit says why).
var breaksTheNode = []string{"PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock", "ProcSubset",
	"PrivateUsers", "SupplementaryGroups", "DynamicUser", "PrivateNetwork", "IPAddressDeny"}

const unitPath = "linux/meshnode.service"

func TestUnitHardening(t *testing.T) {
	lines := readUnit(t, unitPath)
	for key, want := range hardening {
		if got := values(lines, "Service", key); !slices.Equal(got, want) {
			t.Errorf("[Service] %s = %q, want %q", key, got, want)
		}
	}
	for _, key := range breaksTheNode {
		if got := values(lines, "Service", key); got != nil {
			t.Errorf("[Service] %s = %q: it breaks GPU or /proc access (see the unit's closing comment)", key, got)
		}
		if !mentioned(lines, key) {
			t.Errorf("the unit does not explain why %s is left out", key)
		}
	}
}

// mentioned reports whether a comment names key.
func mentioned(lines []unitLine, key string) bool {
	for _, l := range lines {
		if strings.Contains(l.comment, key+"=") {
			return true
		}
	}
	return false
}

// TestUnitSettingsCommented: every setting in [Service] sits in a block
// of settings that a comment opens, so each says why it is there.
func TestUnitSettingsCommented(t *testing.T) {
	lines := readUnit(t, unitPath)
	for i, l := range lines {
		if l.section != "Service" || l.key == "" {
			continue
		}
		j := i - 1
		for j >= 0 && lines[j].key != "" {
			j--
		}
		if j < 0 || lines[j].comment == "" {
			t.Errorf("%s:%d: %s= has no comment above it", unitPath, l.n, l.key)
		}
	}
}

func TestUnitService(t *testing.T) {
	lines := readUnit(t, unitPath)
	want := map[[2]string]string{
		{"Service", "Type"}:                   "notify",
		{"Service", "ExecStart"}:              "/usr/bin/meshnode",
		{"Service", "User"}:                   "meshnode",
		{"Service", "Group"}:                  "meshnode",
		{"Service", "StateDirectory"}:         "meshnode",
		{"Service", "StateDirectoryMode"}:     "0700",
		{"Service", "ConfigurationDirectory"}: "meshnode",
		{"Service", "Restart"}:                "on-failure",
		{"Install", "WantedBy"}:               "multi-user.target",
	}
	for k, v := range want {
		if got := values(lines, k[0], k[1]); !slices.Equal(got, []string{v}) {
			t.Errorf("[%s] %s = %q, want %q", k[0], k[1], got, v)
		}
	}
	// The stop timeout must outlast the node's drain, or systemd kills
	// requests the node was finishing.
	stop, err := time.ParseDuration(strings.Join(values(lines, "Service", "TimeoutStopSec"), ""))
	if err != nil || stop <= node.DefaultDrainTimeout {
		t.Errorf("TimeoutStopSec %v (%v), want more than the drain timeout %v", stop, err, node.DefaultDrainTimeout)
	}
	// Backoff: a first wait, more steps, and a ceiling.
	for _, key := range []string{"RestartSec", "RestartSteps", "RestartMaxDelaySec"} {
		if len(values(lines, "Service", key)) != 1 {
			t.Errorf("[Service] %s missing: restarts need a backoff", key)
		}
	}
}

// nfpmEntry is one item of nfpm.yaml's contents, or a script.
type nfpmEntry struct {
	src, dst, typ, fileInfo string
}

// readNfpm reads what this test needs from nfpm.yaml: the contents list
// and the scripts. It is a line reader for the file's own layout, not a
// YAML parser; nfpm itself reads the file in `make package`.
func readNfpm(t *testing.T) (contents []nfpmEntry, scripts map[string]string) {
	t.Helper()
	b, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	scripts = map[string]string{}
	block := ""
	for _, raw := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(raw), "#") || strings.TrimSpace(raw) == "" {
			continue
		}
		if !strings.HasPrefix(raw, " ") {
			block, _, _ = strings.Cut(raw, ":")
			continue
		}
		line := strings.TrimSpace(raw)
		switch block {
		case "contents":
			if rest, ok := strings.CutPrefix(line, "- "); ok {
				contents = append(contents, nfpmEntry{})
				line = rest
			}
			k, v, _ := strings.Cut(line, ":")
			e := &contents[len(contents)-1]
			v = strings.TrimSpace(v)
			switch k {
			case "src":
				e.src = v
			case "dst":
				e.dst = v
			case "type":
				e.typ = v
			case "file_info":
				e.fileInfo = v
			}
		case "scripts":
			k, v, _ := strings.Cut(line, ":")
			scripts[k] = strings.TrimSpace(v)
		}
	}
	return contents, scripts
}

// TestNfpmListsEveryFile: every file of packaging/linux and
// packaging/scripts is shipped or run, every source exists, and what ships
// is exactly packaging/test/contents.txt, which check.sh holds the built
// packages to.
func TestNfpmListsEveryFile(t *testing.T) {
	contents, scripts := readNfpm(t)
	used := map[string]bool{}
	dsts := map[string]nfpmEntry{}
	for _, e := range contents {
		if e.src != "" {
			used[e.src] = true
			if !strings.Contains(e.src, "${") {
				if _, err := os.Stat(filepath.Join("..", e.src)); err != nil {
					t.Errorf("nfpm.yaml ships %s, which does not exist", e.src)
				}
			}
		}
		dsts[e.dst] = e
	}
	for _, phase := range []string{"preinstall", "postinstall", "preremove", "postremove"} {
		s := scripts[phase]
		if s == "" {
			t.Errorf("nfpm.yaml has no %s script", phase)
			continue
		}
		used[s] = true
		if st, err := os.Stat(filepath.Join("..", s)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s script %s: missing or not executable (%v)", phase, s, err)
		}
	}
	for _, dir := range []string{"linux", "scripts"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if p := "packaging/" + dir + "/" + e.Name(); !used[p] {
				t.Errorf("%s is not in nfpm.yaml", p)
			}
		}
	}

	// contents.txt: "mode owner group path" per regular file.
	b, err := os.ReadFile("test/contents.txt")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("contents.txt: %q is not mode owner group path", line)
		}
		mode, owner, group, path := f[0], f[1], f[2], f[3]
		listed[path] = true
		e, ok := dsts[path]
		if !ok {
			t.Errorf("contents.txt lists %s, which nfpm.yaml does not ship", path)
			continue
		}
		wantInfo := "{mode: " + octal(mode) + "}"
		if owner != "root" || group != "root" {
			wantInfo = "{mode: " + octal(mode) + ", owner: " + owner + ", group: " + group + "}"
		}
		if e.fileInfo != wantInfo {
			t.Errorf("%s: nfpm.yaml file_info %s, contents.txt says %s", path, e.fileInfo, wantInfo)
		}
	}
	for dst, e := range dsts {
		if e.typ != "dir" && !listed[dst] {
			t.Errorf("nfpm.yaml ships %s, which contents.txt does not list", dst)
		}
	}

	// What the node and the unit expect to find.
	for _, want := range []string{
		"/usr/bin/meshnode", // the unit's ExecStart
		"/usr/share/meshnode/models/" + node.BuiltinModelFile,
		"/etc/meshnode/config.toml", // $CONFIGURATION_DIRECTORY/config.toml
	} {
		if _, ok := dsts[want]; !ok {
			t.Errorf("nfpm.yaml does not ship %s", want)
		}
	}
	if e := dsts["/etc/meshnode/config.toml"]; e.src != "node/config.example.toml" || e.typ != "config|noreplace" {
		t.Errorf("config.toml: src %s type %s, want node/config.example.toml as config|noreplace (a conffile)", e.src, e.typ)
	}
}

// octal turns ls-style permissions ("-rw-r-----") into nfpm's 0640.
func octal(perms string) string {
	if len(perms) != 10 {
		return "?" + perms
	}
	var m [3]byte
	for i := range 3 {
		for j, c := range "rwx" {
			if perms[1+3*i+j] == byte(c) {
				m[i] += 4 >> j
			}
		}
	}
	return "0" + string(rune('0'+m[0])) + string(rune('0'+m[1])) + string(rune('0'+m[2]))
}
