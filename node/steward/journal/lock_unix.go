//go:build unix

package journal

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lock takes an exclusive flock on f without waiting. The kernel drops it
// when the descriptor closes, including when the process dies, so a crash
// leaves nothing to clean up.
func lock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return ErrLocked
		case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOLCK):
			return fmt.Errorf("%w: flock: %v", ErrNoLock, err)
		default:
			return fmt.Errorf("journal: flock: %w", err)
		}
	}
}
