package modelfetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/digest"
)

// fakeSource serves data from memory; its knobs misbehave on purpose.
type fakeSource struct {
	data    []byte
	listed  [32]byte // the SHA-256 it lists; zero: the data's
	version string
	// cutAfter ends the first open's body after that many bytes (0: never).
	cutAfter int64
	// noResume answers every open from byte 0.
	noResume bool
	// extra is appended to the body: more bytes than the size.
	extra []byte
	// failOpen fails every open with this error.
	failOpen error

	mu    sync.Mutex
	opens []int64 // offsets asked for
	vals  []string
}

func (s *fakeSource) Origin() string { return "fake" }

func (s *fakeSource) Describe(context.Context) (Meta, error) {
	m := Meta{Size: int64(len(s.data)), SHA256: s.listed, Version: s.version}
	if s.listed == ([32]byte{}) {
		m.SHA256 = sha256.Sum256(s.data)
	}
	return m, nil
}

func (s *fakeSource) Open(_ context.Context, offset int64, _ Meta, validator string) (Chunk, error) {
	s.mu.Lock()
	s.opens = append(s.opens, offset)
	s.vals = append(s.vals, validator)
	first := len(s.opens) == 1
	s.mu.Unlock()
	if s.failOpen != nil {
		return Chunk{}, s.failOpen
	}
	if s.noResume {
		offset = 0
	}
	body := append(bytes.Clone(s.data[offset:]), s.extra...)
	if first && s.cutAfter > 0 {
		body = body[:s.cutAfter]
	}
	return Chunk{Body: io.NopCloser(bytes.NewReader(body)), Start: offset, Validator: "v-" + s.version}, nil
}

func (s *fakeSource) offsets() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.opens...)
}

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newFetcher(t *testing.T) *Fetcher {
	return &Fetcher{Dir: t.TempDir(), Backoff: time.Millisecond, Every: time.Nanosecond}
}

// ggufFiles lists what an inventory scan of dir would see.
func ggufFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if !e.IsDir() && strings.EqualFold(filepath.Ext(e.Name()), ".gguf") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestFetchWritesVerifiedFile(t *testing.T) {
	f := newFetcher(t)
	src := &fakeSource{data: randomBytes(3<<20 + 17), version: "a"}
	var seen []Progress
	var during [][]string
	res, err := f.Fetch(context.Background(), "m", src, func(p Progress) {
		seen = append(seen, p)
		if p.Phase != PhaseDone {
			during = append(during, ggufFiles(t, f.Dir))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "m.gguf" || res.Path != filepath.Join(f.Dir, "m.gguf") || res.Size != int64(len(src.data)) {
		t.Fatalf("result %+v", res)
	}
	got, err := os.ReadFile(res.Path)
	if err != nil || !bytes.Equal(got, src.data) {
		t.Fatalf("file differs from the source (%v)", err)
	}
	want, err := digest.Files(f.Dir, "m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if res.Weights != want.Digest {
		t.Fatalf("weights digest %s, digest.Files says %s", res.Weights, want.Digest)
	}
	if res.SHA256 != sha256.Sum256(src.data) {
		t.Fatal("SHA-256 in the result is not the file's")
	}
	for i, d := range during {
		if len(d) != 0 {
			t.Fatalf("progress report %d: the models dir already lists %v before verification", i, d)
		}
	}
	if last := seen[len(seen)-1]; last.Phase != PhaseDone || last.Done != res.Size {
		t.Fatalf("last progress %+v", last)
	}
	var phases []string
	for _, p := range seen {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
	}
	if strings.Join(phases, ",") != "download,verify,done" {
		t.Fatalf("phases %v", phases)
	}
	if _, err := os.Stat(f.PartialPath("m.gguf")); !os.IsNotExist(err) {
		t.Fatalf("the partial is left behind: %v", err)
	}
	if _, err := os.Stat(recordPath(f.PartialPath("m.gguf"))); !os.IsNotExist(err) {
		t.Fatalf("the partial's record is left behind: %v", err)
	}
}

func TestFetchResumesAfterCut(t *testing.T) {
	f := newFetcher(t)
	src := &fakeSource{data: randomBytes(1 << 20), version: "a", cutAfter: 300_000}
	res, err := f.Fetch(context.Background(), "m.gguf", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := src.offsets(); len(got) != 2 || got[0] != 0 || got[1] != 300_000 {
		t.Fatalf("opens at %v, want [0 300000]", got)
	}
	if src.vals[1] != "v-a" {
		t.Fatalf("the resume presented validator %q, want the first chunk's", src.vals[1])
	}
	if b, _ := os.ReadFile(res.Path); !bytes.Equal(b, src.data) {
		t.Fatal("resumed file differs from the source")
	}
}

// cancelSource cancels the fetch once it has sent cancelAt bytes.
type cancelSource struct {
	*fakeSource
	cancel   context.CancelFunc
	cancelAt int
}

func (s *cancelSource) Open(ctx context.Context, offset int64, m Meta, v string) (Chunk, error) {
	c, err := s.fakeSource.Open(ctx, offset, m, v)
	if err != nil {
		return c, err
	}
	head := io.LimitReader(c.Body, int64(s.cancelAt))
	c.Body = io.NopCloser(io.MultiReader(head, readerFunc(func([]byte) (int, error) {
		s.cancel()
		return 0, context.Canceled
	})))
	return c, nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

func TestFetchResumesAcrossFetches(t *testing.T) {
	f := newFetcher(t)
	data := randomBytes(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	first := &cancelSource{fakeSource: &fakeSource{data: data, version: "a"}, cancel: cancel, cancelAt: 400_000}
	_, err := f.Fetch(ctx, "m", first, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	if fs := ggufFiles(t, f.Dir); len(fs) != 0 {
		t.Fatalf("a cancelled fetch left %v in the models dir", fs)
	}
	st, err := os.Stat(f.PartialPath("m.gguf"))
	if err != nil || st.Size() != 400_000 {
		t.Fatalf("partial after the cut: %v, %v", st, err)
	}
	second := &fakeSource{data: data, version: "a"}
	res, err := f.Fetch(context.Background(), "m", second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.offsets(); len(got) != 1 || got[0] != 400_000 {
		t.Fatalf("second fetch opened at %v, want [400000]", got)
	}
	if res.Resumed != 400_000 {
		t.Fatalf("Resumed %d", res.Resumed)
	}
	if b, _ := os.ReadFile(res.Path); !bytes.Equal(b, data) {
		t.Fatal("file differs")
	}
}

func TestFetchRestartsWhenVersionChanges(t *testing.T) {
	f := newFetcher(t)
	old := randomBytes(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	f.Fetch(ctx, "m", &cancelSource{fakeSource: &fakeSource{data: old, version: "a"}, cancel: cancel, cancelAt: 500_000}, nil)
	newer := append(bytes.Clone(old[:600_000]), randomBytes(10)...)
	src := &fakeSource{data: newer, version: "b"}
	res, err := f.Fetch(context.Background(), "m", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := src.offsets(); len(got) != 1 || got[0] != 0 || src.vals[0] != "" {
		t.Fatalf("after a version change the fetch opened at %v with validator %q, want 0 and none", got, src.vals[0])
	}
	if b, _ := os.ReadFile(res.Path); !bytes.Equal(b, newer) {
		t.Fatal("file differs from the new version")
	}
}

func TestFetchRestartsWhenSourceCannotResume(t *testing.T) {
	f := newFetcher(t)
	src := &fakeSource{data: randomBytes(700_000), version: "a", cutAfter: 200_000, noResume: true}
	res, err := f.Fetch(context.Background(), "m", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(res.Path); !bytes.Equal(b, src.data) {
		t.Fatal("file differs after a restart from 0")
	}
}

func TestFetchDiscardsWrongBytes(t *testing.T) {
	f := newFetcher(t)
	src := &fakeSource{data: randomBytes(500_000), listed: sha256.Sum256([]byte("another file")), version: "a"}
	_, err := f.Fetch(context.Background(), "m", src, nil)
	var he *HashError
	if !errors.As(err, &he) || !errors.Is(err, ErrMismatch) || he.Origin != "fake" || he.What != "SHA-256" {
		t.Fatalf("got %v, want a SHA-256 HashError from fake", err)
	}
	if fs := ggufFiles(t, f.Dir); len(fs) != 0 {
		t.Fatalf("wrong bytes reached the models dir: %v", fs)
	}
	if _, err := os.Stat(f.PartialPath("m.gguf")); !os.IsNotExist(err) {
		t.Fatalf("wrong bytes were kept as a partial: %v", err)
	}
}

func TestFetchRefusesExtraBytes(t *testing.T) {
	f := newFetcher(t)
	src := &fakeSource{data: randomBytes(100_000), version: "a", extra: []byte("trailing")}
	if _, err := f.Fetch(context.Background(), "m", src, nil); !errors.Is(err, ErrSource) {
		t.Fatalf("got %v, want ErrSource", err)
	}
	if fs := ggufFiles(t, f.Dir); len(fs) != 0 {
		t.Fatalf("models dir lists %v", fs)
	}
}

func TestFetchGivesUpAfterAttempts(t *testing.T) {
	f := newFetcher(t)
	f.Attempts = 3
	src := &fakeSource{data: randomBytes(1000), version: "a", failOpen: errors.New("connection refused")}
	_, err := f.Fetch(context.Background(), "m", src, nil)
	if err == nil || !strings.Contains(err.Error(), "failed 3 times") || len(src.offsets()) != 3 {
		t.Fatalf("got %v after %d opens, want failure after 3", err, len(src.offsets()))
	}
	src = &fakeSource{data: randomBytes(1000), version: "a", failOpen: Permanent(errors.New("404: no such file"))}
	if _, err := f.Fetch(context.Background(), "m", src, nil); err == nil || err.Error() != "404: no such file" || len(src.offsets()) != 1 {
		t.Fatalf("permanent failure: %v after %d opens", err, len(src.offsets()))
	}
}

func TestFetchRefusesExistingAndBadNames(t *testing.T) {
	f := newFetcher(t)
	if err := os.WriteFile(filepath.Join(f.Dir, "m.gguf"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{data: randomBytes(10), version: "a"}
	if _, err := f.Fetch(context.Background(), "m", src, nil); !errors.Is(err, ErrExists) {
		t.Fatalf("got %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.Dir, "m.gguf")); string(b) != "mine" {
		t.Fatal("the existing file was touched")
	}
	for _, name := range []string{"", "../x.gguf", "a/b.gguf", ".hidden.gguf", "x\n.gguf"} {
		if _, err := f.Fetch(context.Background(), name, src, nil); !errors.Is(err, ErrBadName) {
			t.Errorf("name %q: got %v, want ErrBadName", name, err)
		}
	}
	if len(src.offsets()) != 0 {
		t.Fatal("the source was opened for a refused fetch")
	}
}

type checkedSource struct{ *fakeSource }

func (checkedSource) Check(r Result) error {
	return fmt.Errorf("weights digest %s is not the one advertised", r.Weights)
}

func TestFetchCheckDiscards(t *testing.T) {
	f := newFetcher(t)
	src := &checkedSource{&fakeSource{data: randomBytes(1000), version: "a"}}
	if _, err := f.Fetch(context.Background(), "m", src, nil); err == nil || !strings.Contains(err.Error(), "not the one advertised") {
		t.Fatalf("got %v", err)
	}
	if fs := ggufFiles(t, f.Dir); len(fs) != 0 {
		t.Fatalf("models dir lists %v", fs)
	}
	if _, err := os.Stat(f.PartialPath("m.gguf")); !os.IsNotExist(err) {
		t.Fatalf("partial kept: %v", err)
	}
}

func TestMeterRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	m := newMeter(func() time.Time { return now }, time.Second, 0, 100_000_000, 0)
	var last Progress
	for i := 1; i <= 10; i++ {
		now = t0.Add(time.Duration(i) * time.Second)
		m.report(func(p Progress) { last = p }, PhaseDownload, int64(i)*1_000_000, false)
	}
	// 1 MB/s steadily: the rate over the window is 1e6 B/s within 1%,
	// and 90 MB are left.
	if last.Rate < 0.99e6 || last.Rate > 1.01e6 {
		t.Fatalf("rate %v, want 1e6 ± 1%%", last.Rate)
	}
	if d := last.ETA - 90*time.Second; d < -time.Second || d > time.Second {
		t.Fatalf("ETA %v, want 90s ± 1s", last.ETA)
	}
}

// hugeSource claims a file no disk holds.
type hugeSource struct{ fakeSource }

func (s *hugeSource) Describe(context.Context) (Meta, error) {
	return Meta{Size: 1 << 60, Version: "a"}, nil
}

func TestFetchRefusesWhatTheDiskCannotHold(t *testing.T) {
	if _, ok := freeSpace(t.TempDir()); !ok {
		t.Skip("free space cannot be told on this system")
	}
	f := newFetcher(t)
	src := &hugeSource{}
	if _, err := f.Fetch(context.Background(), "m", src, nil); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("got %v, want ErrNoSpace", err)
	}
	if len(src.offsets()) != 0 {
		t.Fatal("the source was opened for a file the disk cannot hold")
	}
}
