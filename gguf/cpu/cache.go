package cpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// systemCacheBytes is the size of this machine's last-level cache, read
// once (0 where the system does not say).
var systemCacheBytes = sync.OnceValue(readCacheBytes)

// weightsCached says whether weights of weightBytes are expected to stay
// in a last-level cache of cacheBytes from one token to the next: when
// they fill at most half of it. The rest is left to what else passes
// through it each token (the KV cache, activations, other processes), and
// caches do not keep exactly the most recently used lines. An unknown
// cache (0) is taken to hold nothing.
func weightsCached(weightBytes, cacheBytes int64) bool {
	return cacheBytes > 0 && weightBytes <= cacheBytes/2
}

// cacheDirBytes reads the largest cache level among the cache
// descriptions under dir (Linux's /sys/devices/system/cpu/cpu0/cache: one
// indexN directory per cache, with files level, type and size) that holds
// data, and returns its size.
func cacheDirBytes(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	level, size := 0, int64(0)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		read := func(name string) (string, error) {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), name))
			return strings.TrimSpace(string(b)), err
		}
		typ, err := read("type")
		if err != nil {
			return 0, err
		}
		if typ == "Instruction" {
			continue
		}
		ls, err := read("level")
		if err != nil {
			return 0, err
		}
		l, err := strconv.Atoi(ls)
		if err != nil {
			return 0, fmt.Errorf("cpu: cache %s level %q: %w", e.Name(), ls, err)
		}
		ss, err := read("size")
		if err != nil {
			return 0, err
		}
		s, err := parseCacheSize(ss)
		if err != nil {
			return 0, fmt.Errorf("cpu: cache %s: %w", e.Name(), err)
		}
		if l > level {
			level, size = l, s
		}
	}
	return size, nil
}

// parseCacheSize parses a size as Linux writes a cache's: a number of
// bytes with an optional K, M or G suffix (powers of 1024).
func parseCacheSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"):
		mult = 1 << 30
	}
	num := s
	if mult > 1 {
		num = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("cache size %q is not a number of bytes, K, M or G", s)
	}
	return n * mult, nil
}
