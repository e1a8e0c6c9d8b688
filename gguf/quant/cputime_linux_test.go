package quant_test

import (
	"syscall"
	"time"
	"unsafe"
)

// threadTime is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
// which time spent descheduled on a loaded machine does not add to.
func threadTime() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	return time.Duration(ts.Nano())
}

// threadTimed says whether threadTime counts the thread's CPU time.
const threadTimed = true
