package cpu

// readCacheBytes reads the last-level cache's size from sysfs; 0 where it
// cannot (some ARM boards do not describe their caches).
func readCacheBytes() int64 {
	n, err := cacheDirBytes("/sys/devices/system/cpu/cpu0/cache")
	if err != nil {
		return 0
	}
	return n
}
