//go:build linux

// Package netnslab runs test processes on one LAN segment of network
// namespaces, as the mesh's and discovery's namespace tests and benchmarks
// need: a bridge in a namespace of its own and a namespace per node
// (10.78.0.1, .2, ...) joined to it by a veth pair named eth0, as a real
// NIC would be. Each node is the test binary re-executed in
// a helper test that speaks a line protocol on stdin and stdout (lines for
// the parent start with "@ "): a goroutine cannot safely be moved into a
// namespace, as quic-go's goroutines may run on any thread.
//
// It is for tests only: it needs root and iproute2, and New skips the
// test where they are missing.
package netnslab

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Lab is the namespaces of one test, removed when it ends.
type Lab struct {
	t testing.TB
	// NS are the nodes' namespaces, node i at Addr(i).
	NS []string
	// Netem says whether the kernel has sch_netem, so that SetRTT can
	// delay traffic.
	Netem bool
}

// Addr is node i's address on the segment.
func Addr(i int) string { return fmt.Sprintf("10.78.0.%d", i+1) }

// IP runs an iproute2 command (or, with "tc" first, a tc one).
func IP(args ...string) error {
	name := "ip"
	if args[0] == "tc" {
		name, args = "tc", args[1:]
	}
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// New builds a bridge in a namespace of its own and count node namespaces
// on it. It skips the test where namespaces cannot be made.
func New(t testing.TB, count int) *Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: creating network namespaces needs root")
	}
	for _, c := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("skipping: iproute2's %s command is not installed", c)
		}
	}
	tag := fmt.Sprintf("%d%03x", os.Getpid()%100000, rand.IntN(0x1000))
	sw := "ms-" + tag + "-sw"
	if err := IP("netns", "add", sw); err != nil {
		t.Skipf("skipping: cannot create a network namespace here: %v", err)
	}
	t.Cleanup(func() { IP("netns", "del", sw) })
	if err := IP("-n", sw, "link", "add", "br0", "type", "bridge"); err != nil {
		t.Skipf("skipping: cannot create a bridge here: %v", err)
	}
	if err := IP("-n", sw, "link", "set", "br0", "up"); err != nil {
		t.Fatal(err)
	}
	lab := &Lab{t: t}
	for i := range count {
		ns := fmt.Sprintf("ms-%s-%d", tag, i+1)
		if err := IP("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { IP("netns", "del", ns) })
		port := fmt.Sprintf("p%d", i+1)
		if err := IP("link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", sw); err != nil {
			t.Skipf("skipping: cannot create a veth pair here: %v", err)
		}
		for _, cmd := range [][]string{
			{"-n", sw, "link", "set", port, "master", "br0"},
			{"-n", sw, "link", "set", port, "up"},
			{"-n", ns, "addr", "add", Addr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := IP(cmd...); err != nil {
				t.Fatal(err)
			}
		}
		lab.NS = append(lab.NS, ns)
	}
	lab.Netem = IP("tc", "-n", lab.NS[0], "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", "0ms") == nil
	return lab
}

// SetRTT delays every node's egress by half of rtt with netem, so that any
// two nodes see rtt more than the bridge's own round trip. It fails the
// test without netem.
func (l *Lab) SetRTT(rtt time.Duration) {
	l.t.Helper()
	for _, ns := range l.NS {
		if err := IP("tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", fmt.Sprintf("%dus", (rtt/2).Microseconds())); err != nil {
			l.t.Fatal(err)
		}
	}
}

// Start runs this test binary's test named helper in node i's namespace,
// with env added to the environment; the child is stopped when the test
// ends. name names it in logs.
func (l *Lab) Start(i int, name, helper string, env ...string) *Child {
	l.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		l.t.Fatal(err)
	}
	c := &Child{Name: name, lines: make(chan string, 256)}
	c.cmd = exec.Command("ip", "netns", "exec", l.NS[i], exe, "-test.run=^"+helper+"$", "-test.count=1", "-test.timeout=0")
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stderr = &c.out
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		l.t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "@ "); ok {
				c.lines <- s
			} else {
				c.out.Write(append(sc.Bytes(), '\n'))
			}
		}
		close(c.lines)
	}()
	l.t.Cleanup(func() { c.Stop(l.t) })
	return c
}

// Child is one node's process.
type Child struct {
	Name string
	// Skip are prefixes of unsolicited lines Ask passes over.
	Skip  []string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   Buffer // its stderr and the lines not for the parent
	lines chan string
}

// Expect waits up to 30 s for a line starting with prefix, skipping
// others, and returns the rest; an "err" line, the child's exit or the
// timeout is false.
func (c *Child) Expect(prefix string) (string, bool) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s, ok := <-c.lines:
			if !ok {
				return "", false
			}
			if rest, ok := strings.CutPrefix(s, prefix); ok {
				return rest, true
			}
			if rest, ok := strings.CutPrefix(s, "err "); ok {
				c.out.Write([]byte("error: " + rest + "\n"))
				return "", false
			}
		case <-timeout:
			return "", false
		}
	}
}

// Ask sends a command and returns the next answer line (an "err" one as
// an error), passing over lines that start with one of Skip.
func (c *Child) Ask(cmd string) (string, error) {
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		return "", err
	}
next:
	for s := range c.lines {
		for _, p := range c.Skip {
			if strings.HasPrefix(s, p) {
				continue next
			}
		}
		if rest, ok := strings.CutPrefix(s, "err "); ok {
			return "", fmt.Errorf("%s", rest)
		}
		return s, nil
	}
	return "", fmt.Errorf("%s exited", c.Name)
}

// Log is what the child wrote that was not for the parent.
func (c *Child) Log() string { return c.Name + ":\n" + c.out.String() }

// Stop closes the child's stdin, which ends it cleanly, and kills it if
// it has not ended a few seconds later.
func (c *Child) Stop(t testing.TB) {
	if c.cmd.ProcessState != nil {
		return
	}
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && !t.Failed() {
			t.Errorf("%s: %v\n%s", c.Name, err, c.out.String())
		}
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop when asked", c.Name)
	}
}

// Buffer is a bytes.Buffer safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
