package cpu

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// readCacheBytes reads the last-level cache's size from sysctl: on Apple
// silicon the performance cores' L2 (the system-level cache is not
// reported), elsewhere hw.l3cachesize or hw.l2cachesize; 0 where none is
// given. The values are 32- or 64-bit integers depending on the name.
func readCacheBytes() int64 {
	for _, name := range []string{"hw.perflevel0.l2cachesize", "hw.l3cachesize", "hw.l2cachesize"} {
		b, err := unix.SysctlRaw(name)
		var n int64
		switch {
		case err != nil:
			continue
		case len(b) == 4:
			n = int64(binary.LittleEndian.Uint32(b))
		case len(b) == 8:
			n = int64(binary.LittleEndian.Uint64(b))
		}
		if n > 0 {
			return n
		}
	}
	return 0
}
