// Package sdnotify tells systemd about the service's state through
// $NOTIFY_SOCKET (sd_notify(3)): READY=1 once the node serves, STOPPING=1
// when it begins to shut down. It is a few lines over a unix datagram
// socket, so the binary needs no libsystemd and no cgo.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// Common states.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

// Notify sends state to the socket named by $NOTIFY_SOCKET. It reports
// false, and no error, when the variable is unset (not run by systemd, or
// not Type=notify).
func Notify(state string) (bool, error) {
	return NotifySocket(os.Getenv("NOTIFY_SOCKET"), state)
}

// NotifySocket sends state to socket; an empty socket is a no-op. A leading
// '@' names a Linux abstract socket, as systemd writes it.
func NotifySocket(socket, state string) (bool, error) {
	if socket == "" {
		return false, nil
	}
	name := socket
	if strings.HasPrefix(name, "@") {
		name = "\x00" + name[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	return true, nil
}
