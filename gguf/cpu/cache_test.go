package cpu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseCacheSize(t *testing.T) {
	for s, want := range map[string]int64{"48K": 48 << 10, "2048K": 2 << 20, "266240K": 266240 << 10, "4M": 4 << 20, "1G": 1 << 30, "512": 512} {
		if got, err := parseCacheSize(s); err != nil || got != want {
			t.Errorf("parseCacheSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "K", "-1K", "12T", "1.5M", "99999999999999999999K", "8589934592G"} {
		if got, err := parseCacheSize(s); err == nil {
			t.Errorf("parseCacheSize(%q) = %d, want an error", s, got)
		}
	}
}

// writeCaches writes cache descriptions as Linux's sysfs does, one
// indexN directory per {level, type, size}.
func writeCaches(t *testing.T, caches [][3]string) string {
	dir := t.TempDir()
	for i, c := range caches {
		d := filepath.Join(dir, "index"+string(rune('0'+i)))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for j, name := range []string{"level", "type", "size"} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(c[j]+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func TestCacheDirBytes(t *testing.T) {
	// This machine's, out of order, with the instruction cache listed last.
	dir := writeCaches(t, [][3]string{
		{"2", "Unified", "2048K"}, {"3", "Unified", "266240K"}, {"1", "Data", "48K"}, {"1", "Instruction", "32K"},
	})
	if got, err := cacheDirBytes(dir); err != nil || got != 266240<<10 {
		t.Errorf("cacheDirBytes = %d, %v; want %d", got, err, 266240<<10)
	}
	// Two levels only (no L3), as on many ARM boards.
	dir = writeCaches(t, [][3]string{{"1", "Data", "32K"}, {"2", "Unified", "512K"}})
	if got, err := cacheDirBytes(dir); err != nil || got != 512<<10 {
		t.Errorf("cacheDirBytes = %d, %v; want %d", got, err, 512<<10)
	}
	dir = writeCaches(t, [][3]string{{"1", "Data", "32K"}, {"x", "Unified", "512K"}})
	if _, err := cacheDirBytes(dir); err == nil {
		t.Error("a level that is not a number: no error")
	}
	dir = writeCaches(t, [][3]string{{"2", "Unified", "lots"}})
	if _, err := cacheDirBytes(dir); err == nil {
		t.Error("a size that is not a number: no error")
	}
	if _, err := cacheDirBytes(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("no directory: no error")
	}
}

func TestWeightsCached(t *testing.T) {
	for _, c := range []struct {
		weights, cache int64
		want           bool
	}{
		{15 << 20, 260 << 20, true},
		{130 << 20, 260 << 20, true},
		{130<<20 + 1, 260 << 20, false},
		{4 << 30, 32 << 20, false},
		{1, 0, false},  // unknown cache
		{1, -1, false}, // told to always prefetch
	} {
		if got := weightsCached(c.weights, c.cache); got != c.want {
			t.Errorf("weightsCached(%d, %d) = %v, want %v", c.weights, c.cache, got, c.want)
		}
	}
}
