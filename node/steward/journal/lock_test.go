//go:build unix

package journal

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The lock test runs this test binary again as a second process: with
// lockChildEnv set, TestMain opens the journal it names, reports, and
// holds it until killed.
const lockChildEnv = "MESHNODE_JOURNAL_LOCK_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(lockChildEnv); path != "" {
		j, err := Open(path, Options{})
		if err != nil {
			fmt.Println("refused:", err)
			os.Exit(3)
		}
		fmt.Println("locked")
		_ = j
		// Hold the lock until killed. Not select{}: with nothing else to
		// run, the runtime would call that a deadlock and exit, dropping
		// the lock.
		for {
			time.Sleep(time.Hour)
		}
	}
	os.Exit(m.Run())
}

func startLockChild(t *testing.T, path string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

// TestLockSecondProcess: a journal held by one process cannot be opened by
// another, which fails with a message that says so; the lock goes with
// the holder's death (SIGKILL: no clean-up runs).
func TestLockSecondProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal", "steward.jsonl")
	holder, out := startLockChild(t, path)
	line, err := out.ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	_, err = Open(path, Options{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "another steward holds this journal") {
		t.Fatalf("open while another process holds it: %v", err)
	}
	// A second child fails to start, saying why.
	second, out2 := startLockChild(t, path)
	msg, _ := out2.ReadString('\n')
	err = second.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(msg, "another steward holds this journal") {
		t.Fatalf("second steward: %v, %q", err, msg)
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	holder.Wait()
	var j *Journal
	for deadline := time.Now().Add(5 * time.Second); ; {
		if j, err = Open(path, Options{}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("open after the holder died: %v", err)
	}
	j.Close()
}
