package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestNotifySocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sent, err := NotifySocket(path, Ready)
	if err != nil || !sent {
		t.Fatalf("NotifySocket = %v, %v", sent, err)
	}
	buf := make([]byte, 64)
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := ln.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "READY=1" {
		t.Fatalf("systemd got %q", buf[:n])
	}
}

func TestNotifyUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Fatalf("Notify without a socket = %v, %v", sent, err)
	}
	if _, err := NotifySocket(filepath.Join(t.TempDir(), "absent"), Ready); err == nil {
		t.Fatal("a missing socket is not an error")
	}
}
