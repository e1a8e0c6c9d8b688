package meshnode_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Doc examples: every shell block of README.md and docs/*.md carries, on
// the line before its opening fence, one of
//
//	<!-- doctest -->                  it runs as written (TestDocExamples)
//	<!-- doctest: skip REASON -->     it cannot run here, for REASON
//
// HTML comments, so readers of the rendered page do not see them.
const (
	docRun  = "<!-- doctest -->"
	docSkip = "<!-- doctest: skip "
)

// docBlock is one shell block of a document.
type docBlock struct {
	file string
	line int // the opening fence's
	run  bool
	text string
}

var shellFence = regexp.MustCompile("^( *)```(sh|bash|shell|console)\\s*$")

// docBlocks reads the shell blocks of the documents, refusing one that is
// marked neither way.
func docBlocks(t *testing.T, files []string) []docBlock {
	t.Helper()
	var out []docBlock
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			m := shellFence.FindStringSubmatch(lines[i])
			if m == nil {
				continue
			}
			indent := m[1]
			prev := ""
			if i > 0 {
				prev = strings.TrimSpace(lines[i-1])
			}
			blk := docBlock{file: f, line: i + 1, run: prev == docRun}
			if !blk.run && !(strings.HasPrefix(prev, docSkip) && strings.HasSuffix(prev, "-->") && len(prev) > len(docSkip)+len("-->")) {
				t.Errorf("%s:%d: a shell block with neither %s nor %sREASON --> on the line before it", f, i+1, docRun, docSkip)
			}
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, strings.TrimPrefix(lines[i], indent))
			}
			blk.text = strings.Join(body, "\n") + "\n"
			out = append(out, blk)
		}
	}
	return out
}

// TestDocExamples runs every block the README and the docs mark runnable,
// as a user would paste it, against a real meshnode started here on
// loopback: both binaries are built as `go run` builds them and run from
// a directory outside the checkout, with a fresh home (so the node uses
// its default state dir and finds the built-in model by itself, and
// meshcli finds the node's credential and keeps its keys there). The
// only change made to a block is the API's port (9337 in the docs). A
// document's blocks run in order, in a directory of their own; each must
// exit 0 (curl fails on an HTTP error), and no answer it prints may carry
// a grant breach or a serve cut short.
func TestDocExamples(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, append([]string{"README.md"}, docs...))
	if t.Failed() {
		return
	}
	if testing.Short() {
		t.Skip("builds meshnode and meshcli and runs the docs' examples against a node")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the docs' examples need %s: %v", tool, err)
		}
	}

	bin := t.TempDir()
	goBuild(t, bin) // as go run builds: it knows the checkout that built it

	home := t.TempDir()
	addr := freeLoopbackAddr(t)
	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"MESHCLI_API=http://" + addr,
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "MESHNODE_"), strings.HasPrefix(name, "MESHCLI_"), strings.HasPrefix(name, "XDG_"),
			name == "HOME", name == "PATH", name == "STATE_DIRECTORY", name == "CONFIGURATION_DIRECTORY":
		default:
			env = append(env, kv)
		}
	}

	var nodeLog syncBuffer
	node := exec.Command(filepath.Join(bin, "meshnode"), "--http-addr", addr, "--quic-addr", "127.0.0.1:0", "--discovery", "none")
	node.Env, node.Dir, node.Stdout, node.Stderr = env, home, &nodeLog, &nodeLog
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { node.Wait(); close(exited) }()
	t.Cleanup(func() {
		node.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			node.Process.Kill()
			<-exited
		}
	})
	waitHealthy(t, addr, exited, &nodeLog)
	if !strings.Contains(nodeLog.String(), "builtin_default=true") {
		t.Fatalf("the node, run outside the checkout, did not find the built-in model:\n%s", nodeLog.String())
	}

	byFile := map[string][]docBlock{}
	var order []string
	for _, b := range blocks {
		if !b.run {
			continue
		}
		if _, seen := byFile[b.file]; !seen {
			order = append(order, b.file)
		}
		byFile[b.file] = append(byFile[b.file], b)
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	for _, file := range order {
		t.Run(filepath.Base(file), func(t *testing.T) {
			work := t.TempDir()
			for _, b := range byFile[file] {
				script := strings.NewReplacer("127.0.0.1:9337", addr, "localhost:9337", "localhost:"+port).Replace(b.text)
				// curl answers an HTTP error with its body and exit 22, as
				// a reader would notice it; nothing else is added.
				prelude := "curl() { command curl --fail-with-body --show-error \"$@\"; }\n"
				bctx, bcancel := context.WithTimeout(context.Background(), 2*time.Minute)
				cmd := exec.CommandContext(bctx, "bash", "-e", "-o", "pipefail", "-c", prelude+script)
				cmd.Env, cmd.Dir = env, work
				out, err := cmd.CombinedOutput()
				bcancel()
				if err != nil {
					t.Fatalf("%s:%d does not run as written: %v\n--- block\n%s--- output\n%s\n--- node log (end)\n%s",
						b.file, b.line, err, b.text, out, tail(nodeLog.String(), 3000))
				}
				// An example whose serve breaks its own grant's caveat, or
				// is cut short, runs but shows the reader the wrong thing.
				for _, bad := range []string{`"grant_breach"`, `"cut_short"`, `"joule_ceiling"`} {
					if bytes.Contains(out, []byte(bad)) {
						t.Fatalf("%s:%d runs, but its answer carries %s:\n%s", b.file, b.line, bad, out)
					}
				}
				t.Logf("%s:%d ran:\n%s", b.file, b.line, tail(string(out), 2000))
			}
		})
	}
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitHealthy waits for the node's API to answer /health.
func waitHealthy(t *testing.T, addr string, exited <-chan struct{}, log *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("meshnode exited:\n%s", log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("meshnode not answering on %s after 60s:\n%s", addr, log.String())
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("…%s", s[len(s)-n:])
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// goBuild builds meshnode and meshcli into dir with extra go build flags.
func goBuild(t *testing.T, dir string, flags ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string{"build"}, flags...), "-o", dir+string(filepath.Separator), "./cmd/meshnode", "./cmd/meshcli")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// TestBuiltinModelLayouts: a binary built as `make build` builds it
// (-trimpath: it does not know the checkout) finds the built-in model by
// where it lies: bin/meshnode in a checkout finds ../models, and an
// install prefix's bin/meshnode finds ../share/meshnode/models, whatever
// the working directory; with neither, meshnode run names the model and
// says where it looked.
func TestBuiltinModelLayouts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meshnode")
	}
	built := t.TempDir()
	goBuild(t, built, "-trimpath")
	model, err := os.ReadFile(filepath.Join("models", "meshnode-fortunes-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(filepath.Join(built, "meshnode"))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_STATE_HOME=" + filepath.Join(home, "state"), "XDG_CONFIG_HOME=" + filepath.Join(home, "config"),
		"PATH=" + os.Getenv("PATH")}
	run := func(bin string) (string, error) {
		cmd := exec.Command(bin, "run", "meshnode-fortunes-q8_0", "-p", "Love is", "-n", "2")
		cmd.Env, cmd.Dir = env, home
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, layout := range []struct{ name, bin, models string }{
		{"checkout", "bin/meshnode", "models"},
		{"install prefix", "usr/bin/meshnode", "usr/share/meshnode/models"},
	} {
		root := t.TempDir()
		bin := filepath.Join(root, layout.bin)
		for _, f := range []struct {
			path string
			data []byte
			mode os.FileMode
		}{{bin, exe, 0o755}, {filepath.Join(root, layout.models, "meshnode-fortunes-q8_0.gguf"), model, 0o644}} {
			if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := run(bin); err != nil || !strings.HasPrefix(out, "Love is") {
			t.Errorf("%s (%s): %v\n%s", layout.name, layout.bin, err, out)
		}
	}
	alone := filepath.Join(t.TempDir(), "meshnode")
	if err := os.WriteFile(alone, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := run(alone); err == nil || !strings.Contains(out, "for the built-in model in") {
		t.Errorf("a binary with no model beside it: %v\n%s", err, out)
	}
}
