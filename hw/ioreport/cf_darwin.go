//go:build darwin

package ioreport

import (
	"fmt"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

const (
	coreFoundationPath = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
	ioReportPath       = "/usr/lib/libIOReport.dylib"

	kCFStringEncodingUTF8 = 0x08000100
)

// lib is the CoreFoundation and IOReport function table. Every CF object
// is a uintptr here; the glue does no arithmetic and no parsing beyond
// turning CFStrings into Go strings.
type lib struct {
	CFRelease                     func(obj uintptr)
	CFStringCreateWithCString     func(alloc uintptr, s string, enc uint32) uintptr
	CFStringGetCString            func(s uintptr, buf *byte, size int64, enc uint32) bool
	CFDictionaryGetCount          func(d uintptr) int64
	CFDictionaryCreateMutableCopy func(alloc uintptr, capacity int64, d uintptr) uintptr
	CFDictionaryGetValue          func(d, key uintptr) uintptr
	CFArrayGetCount               func(a uintptr) int64
	CFArrayGetValueAtIndex        func(a uintptr, i int64) uintptr

	IOReportCopyChannelsInGroup   func(group, subgroup uintptr, a, b, c uint64) uintptr
	IOReportCreateSubscription    func(a, desired uintptr, subbed *uintptr, id uint64, b uintptr) uintptr
	IOReportCreateSamples         func(sub, channels, a uintptr) uintptr
	IOReportCreateSamplesDelta    func(prev, cur, a uintptr) uintptr
	IOReportChannelGetGroup       func(item uintptr) uintptr
	IOReportChannelGetChannelName func(item uintptr) uintptr
	IOReportChannelGetUnitLabel   func(item uintptr) uintptr
	IOReportSimpleGetIntegerValue func(item uintptr, index int32) int64
}

var (
	loadOnce sync.Once
	loaded   *lib
	loadErr  error
)

func load() (*lib, error) {
	loadOnce.Do(func() {
		cf, err := purego.Dlopen(coreFoundationPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("%w: %v", ErrUnsupported, err)
			return
		}
		ior, err := purego.Dlopen(ioReportPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = fmt.Errorf("%w: %v", ErrUnsupported, err)
			return
		}
		var l lib
		for _, f := range []struct {
			h    uintptr
			fn   any
			name string
		}{
			{cf, &l.CFRelease, "CFRelease"},
			{cf, &l.CFStringCreateWithCString, "CFStringCreateWithCString"},
			{cf, &l.CFStringGetCString, "CFStringGetCString"},
			{cf, &l.CFDictionaryGetCount, "CFDictionaryGetCount"},
			{cf, &l.CFDictionaryCreateMutableCopy, "CFDictionaryCreateMutableCopy"},
			{cf, &l.CFDictionaryGetValue, "CFDictionaryGetValue"},
			{cf, &l.CFArrayGetCount, "CFArrayGetCount"},
			{cf, &l.CFArrayGetValueAtIndex, "CFArrayGetValueAtIndex"},
			{ior, &l.IOReportCopyChannelsInGroup, "IOReportCopyChannelsInGroup"},
			{ior, &l.IOReportCreateSubscription, "IOReportCreateSubscription"},
			{ior, &l.IOReportCreateSamples, "IOReportCreateSamples"},
			{ior, &l.IOReportCreateSamplesDelta, "IOReportCreateSamplesDelta"},
			{ior, &l.IOReportChannelGetGroup, "IOReportChannelGetGroup"},
			{ior, &l.IOReportChannelGetChannelName, "IOReportChannelGetChannelName"},
			{ior, &l.IOReportChannelGetUnitLabel, "IOReportChannelGetUnitLabel"},
			{ior, &l.IOReportSimpleGetIntegerValue, "IOReportSimpleGetIntegerValue"},
		} {
			sym, err := purego.Dlsym(f.h, f.name)
			if err != nil {
				loadErr = fmt.Errorf("%w: %s: %v", ErrUnsupported, f.name, err)
				return
			}
			purego.RegisterFunc(f.fn, sym)
		}
		loaded = &l
	})
	return loaded, loadErr
}

// subscription is the darwin [Source]: an IOReport subscription to the
// Energy Model group and the last sample taken from it.
type subscription struct {
	l        *lib
	channels uintptr // the mutable channel dictionary subscribed to
	sub      uintptr
	prev     uintptr
	key      uintptr // "IOReportChannels"
}

// Open subscribes to the Energy Model group and returns its counter.
func Open() (*Counter, error) {
	l, err := load()
	if err != nil {
		return nil, err
	}
	group := l.CFStringCreateWithCString(0, Group, kCFStringEncodingUTF8)
	if group == 0 {
		return nil, fmt.Errorf("ioreport: CFStringCreateWithCString failed")
	}
	chans := l.IOReportCopyChannelsInGroup(group, 0, 0, 0, 0)
	l.CFRelease(group)
	if chans == 0 {
		return nil, fmt.Errorf("%w: no %q channel group", ErrUnsupported, Group)
	}
	s := &subscription{l: l}
	s.channels = l.CFDictionaryCreateMutableCopy(0, l.CFDictionaryGetCount(chans), chans)
	l.CFRelease(chans)
	if s.channels == 0 {
		return nil, fmt.Errorf("ioreport: copying the channel dictionary failed")
	}
	var subbed uintptr
	s.sub = l.IOReportCreateSubscription(0, s.channels, &subbed, 0, 0)
	if s.sub == 0 {
		l.CFRelease(s.channels)
		return nil, fmt.Errorf("ioreport: IOReportCreateSubscription failed")
	}
	// subbed is not ours to release: the public users of this private
	// API leave it alone, and a wrong release would be a double free.
	s.key = l.CFStringCreateWithCString(0, "IOReportChannels", kCFStringEncodingUTF8)
	s.prev = l.IOReportCreateSamples(s.sub, s.channels, 0)
	if s.prev == 0 || s.key == 0 {
		s.Close()
		return nil, fmt.Errorf("ioreport: IOReportCreateSamples failed")
	}
	c, err := NewCounter(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	return c, nil
}

// Delta samples the subscription and returns each channel's change since
// the previous sample.
func (s *subscription) Delta() ([]Channel, error) {
	l := s.l
	cur := l.IOReportCreateSamples(s.sub, s.channels, 0)
	if cur == 0 {
		return nil, fmt.Errorf("ioreport: IOReportCreateSamples failed")
	}
	delta := l.IOReportCreateSamplesDelta(s.prev, cur, 0)
	l.CFRelease(s.prev)
	s.prev = cur
	if delta == 0 {
		return nil, fmt.Errorf("ioreport: IOReportCreateSamplesDelta failed")
	}
	defer l.CFRelease(delta)
	arr := l.CFDictionaryGetValue(delta, s.key)
	if arr == 0 {
		return nil, fmt.Errorf("ioreport: delta sample has no IOReportChannels")
	}
	n := l.CFArrayGetCount(arr)
	out := make([]Channel, 0, n)
	for i := range n {
		item := l.CFArrayGetValueAtIndex(arr, i)
		out = append(out, Channel{
			Group: s.str(l.IOReportChannelGetGroup(item)),
			Name:  s.str(l.IOReportChannelGetChannelName(item)),
			Unit:  s.str(l.IOReportChannelGetUnitLabel(item)),
			Value: l.IOReportSimpleGetIntegerValue(item, 0),
		})
	}
	return out, nil
}

// str copies a CFString (not owned: Get functions) into Go.
func (s *subscription) str(cf uintptr) string {
	if cf == 0 {
		return ""
	}
	var buf [256]byte
	if !s.l.CFStringGetCString(cf, &buf[0], int64(len(buf)), kCFStringEncodingUTF8) {
		return ""
	}
	return cString(buf[:])
}

// Close releases the subscription and its last sample.
func (s *subscription) Close() error {
	for _, o := range []*uintptr{&s.prev, &s.key, &s.sub, &s.channels} {
		if *o != 0 {
			s.l.CFRelease(*o)
			*o = 0
		}
	}
	return nil
}

// cString is the Go string of a NUL-terminated buffer, trimmed.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}
