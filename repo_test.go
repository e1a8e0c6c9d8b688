// Repository-wide checks: every package documents itself, and the shipped
// binaries depend only on modules someone chose on purpose.
package meshnode_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestPackageDocs holds every package to a doc comment, so a newcomer can
// read what each folder is for with `go doc`.
func TestPackageDocs(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}}\t{{len .GoFiles}}\t{{.Doc}}", "./...") {
		path, rest, _ := strings.Cut(line, "\t")
		files, doc, _ := strings.Cut(rest, "\t")
		if files == "0" {
			continue // test-only, like this one
		}
		if strings.TrimSpace(doc) == "" {
			t.Errorf("package %s has no doc comment", path)
		}
	}
}

// TestDependencyBudget fails when the binaries pull in a module that is not
// in testdata/allowed-modules.txt, or when that list names one they no
// longer use. A new dependency is added there, on purpose, in the same
// change that needs it.
func TestDependencyBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the binaries' dependency graph")
	}
	used := map[string]bool{}
	for _, m := range goList(t, "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}",
		"./cmd/meshnode", "./cmd/meshcli") {
		used[m] = true
	}
	// Modules only some targets reach (darwin's purego objc path, say) are
	// counted too.
	for _, target := range [][2]string{{"darwin", "arm64"}, {"linux", "arm64"}} {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}",
			"./cmd/meshnode", "./cmd/meshcli")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+target[0], "GOARCH="+target[1])
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list for %s/%s: %v", target[0], target[1], err)
		}
		for _, m := range strings.Fields(string(out)) {
			used[m] = true
		}
	}

	f, err := os.Open("testdata/allowed-modules.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	allowed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			allowed[line] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	var extra, stale []string
	for m := range used {
		if !allowed[m] {
			extra = append(extra, m)
		}
	}
	for m := range allowed {
		if !used[m] {
			stale = append(stale, m)
		}
	}
	slices.Sort(extra)
	slices.Sort(stale)
	for _, m := range extra {
		t.Errorf("binaries depend on %s, which testdata/allowed-modules.txt does not allow", m)
	}
	for _, m := range stale {
		t.Errorf("testdata/allowed-modules.txt allows %s, which the binaries no longer use: remove it", m)
	}
}
