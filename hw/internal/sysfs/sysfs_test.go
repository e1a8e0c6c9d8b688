package sysfs

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestRead(t *testing.T) {
	fsys := fstest.MapFS{
		"uint":  {Data: []byte("262143328850\n")},
		"neg":   {Data: []byte("-12\n")},
		"unit":  {Data: []byte("32760 ma\n")},
		"dt":    {Data: []byte("NVIDIA Jetson AGX Orin\x00")},
		"bad":   {Data: []byte("12x\n")},
		"huge":  {Data: []byte(strings.Repeat("1", MaxAttr+1))},
		"empty": {Data: nil},
	}
	if v, err := ReadUint(fsys, "uint"); err != nil || v != 262143328850 {
		t.Errorf("ReadUint = %d, %v", v, err)
	}
	if v, err := ReadInt(fsys, "neg"); err != nil || v != -12 {
		t.Errorf("ReadInt(neg) = %d, %v", v, err)
	}
	if v, err := ReadInt(fsys, "unit"); err != nil || v != 32760 {
		t.Errorf("ReadInt(unit) = %d, %v", v, err)
	}
	if s, err := ReadString(fsys, "dt"); err != nil || s != "NVIDIA Jetson AGX Orin" {
		t.Errorf("ReadString(dt) = %q, %v", s, err)
	}
	for _, name := range []string{"bad", "huge", "empty", "missing"} {
		if _, err := ReadUint(fsys, name); err == nil {
			t.Errorf("ReadUint(%s) succeeded", name)
		}
	}
}

// FuzzReadInt holds the parser to never panicking on what a driver might
// publish, and to agreeing with ReadUint on plain non-negative numbers.
func FuzzReadInt(f *testing.F) {
	for _, s := range []string{"0\n", "-5", "32760 ma\n", "18446744073709551615", "1e3", "\x00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fsys := fstest.MapFS{"a": {Data: []byte(s)}}
		i, ierr := ReadInt(fsys, "a")
		u, uerr := ReadUint(fsys, "a")
		if ierr == nil && uerr == nil && i >= 0 && uint64(i) != u {
			t.Fatalf("ReadInt %d and ReadUint %d disagree on %q", i, u, s)
		}
	})
}
