package conformance

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testFuncs lists the Test functions declared in a package directory's
// _test.go files.
func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s: %v", dir, err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				names[fn.Name.Name] = true
			}
		}
	}
	return names
}

// TestSuite holds the §7 map to the tests that exist, and to the README
// that publishes it.
func TestSuite(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(v1, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string]map[string]bool{}
	sections := map[string]bool{}
	for _, it := range Suite {
		if sections[it.Section] {
			t.Errorf("%s listed twice", it.Section)
		}
		sections[it.Section] = true
		if len(it.Tests) == 0 {
			t.Errorf("%s names no tests", it.Section)
		}
		if it.Status != Covered && it.Note == "" {
			t.Errorf("%s is %s without a note saying what is missing", it.Section, it.Status)
		}
		if !strings.Contains(string(readme), it.Section) {
			t.Errorf("v1/README.md does not list %s", it.Section)
		}
		for _, ref := range it.Tests {
			pkg, name, ok := strings.Cut(ref, ".")
			if !ok {
				t.Errorf("%s: test %q is not <package dir>.<TestName>", it.Section, ref)
				continue
			}
			dir := filepath.Join("..", pkg)
			if pkg == "conformance" {
				dir = "."
			}
			if cache[dir] == nil {
				cache[dir] = testFuncs(t, dir)
			}
			if !cache[dir][name] {
				t.Errorf("%s: %s has no %s", it.Section, pkg, name)
			}
			if !strings.Contains(string(readme), name) {
				t.Errorf("v1/README.md does not name %s (for %s)", name, it.Section)
			}
		}
	}
	for i := 1; i <= 7; i++ {
		if s := "§7." + string(rune('0'+i)); !sections[s] {
			t.Errorf("§7 item %s is not in the suite", s)
		}
	}
}
