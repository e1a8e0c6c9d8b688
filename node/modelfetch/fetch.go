// Package modelfetch writes a model file fetched from elsewhere — the
// Hugging Face hub, a mesh peer — into the models dir, resumably and
// verified, so that nothing half-written or unverified is ever served.
//
// The bytes go to a partial file in the models dir's hidden PartialDir
// (models/.partial/NAME.gguf), beside a record of what they are (the
// source, the file's size and SHA-256, and the validators — ETags — of
// the version they belong to). A fetch that is cut off resumes from the
// partial's length: within one Fetch, by reopening the source; across
// Fetches (a node restart, a new `meshcli pull`), from the record, unless
// the source's version changed, when it restarts. Once the partial holds
// every byte it is synced, hashed (SHA-256, and the BLAKE3 weights digest
// of gguf/digest), checked against what the source listed and then
// hard-linked into the models dir under its name, which the inventory and
// the loader look at; a hash mismatch discards it. The inventory never
// looks into PartialDir (it scans *.gguf files of the dir itself), and
// owner control never loads a name with a "/", so a partial is never
// served.
package modelfetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/zeebo/blake3"

	"github.com/meshnode/meshnode/gguf/digest"
)

// PartialDir is where partial files live, inside the models dir: on the
// same file system, so a finished file is linked into place, never copied.
const PartialDir = ".partial"

// Meta is what a source says the file is.
type Meta struct {
	// Size is the file's length in bytes.
	Size int64
	// SHA256 is the digest the source lists for the whole file.
	SHA256 [32]byte
	// Version names the version of the file the source serves (the hub's
	// ETag, the holder's SHA-256): a partial of another version is
	// restarted, never spliced.
	Version string
}

// Chunk is an opened source: its bytes from Start on.
type Chunk struct {
	Body io.ReadCloser
	// Start is the offset of Body's first byte: the offset asked for, or
	// 0 when the source could not resume (the partial restarts).
	Start int64
	// Validator is the validator of the bytes sent (an HTTP ETag), for the
	// next resume to present (If-Range); empty when there is none.
	Validator string
}

// Source is where a file's bytes come from.
type Source interface {
	// Describe says what the file is now.
	Describe(ctx context.Context) (Meta, error)
	// Open returns the file's bytes from offset on. validator is what the
	// Chunk that wrote the partial's bytes carried ("" for none): a source
	// that cannot vouch the bytes from offset on belong with them starts
	// at 0 instead.
	Open(ctx context.Context, offset int64, m Meta, validator string) (Chunk, error)
	// Origin names the source, in messages and the partial's record:
	// "huggingface.co/owner/repo/file.gguf", "peer 1a2b3c4d".
	Origin() string
}

// Checker is a Source with a check of its own that the complete, hashed
// file must pass before it is linked into place (a mesh peer's weights
// digest); an error discards the partial.
type Checker interface {
	Check(r Result) error
}

// Phases of a fetch, as Progress reports them.
const (
	PhaseDownload = "download"
	PhaseVerify   = "verify"
	PhaseDone     = "done"
)

// Progress is where a fetch stands.
type Progress struct {
	Phase string
	// Done and Total are bytes: downloaded (verify: hashed) and the file's size.
	Done, Total int64
	// Rate is bytes per second over the last few seconds; ETA the time
	// left at that rate (0 when unknown).
	Rate float64
	ETA  time.Duration
	// Resumed is how many bytes of an earlier attempt were kept.
	Resumed int64
}

// Result is a finished fetch.
type Result struct {
	// Path is the file in the models dir; Name its file name.
	Path, Name string
	Size       int64
	SHA256     [32]byte
	// Weights is the file's weights digest (gguf/digest), as the node
	// computes it when it loads the model; BLAKE3 is the hash of its bytes
	// that the digest is computed over, with the file's name.
	Weights digest.Sum
	BLAKE3  digest.Sum
	// Resumed is how many bytes an earlier attempt had fetched already.
	Resumed int64
}

// Errors a fetch can end with; test with errors.Is (and errors.As for
// *HashError).
var (
	// ErrExists: the models dir has a file of that name already.
	ErrExists = errors.New("the models dir already has a file of that name")
	// ErrBusy: the same file is being fetched already.
	ErrBusy = errors.New("that file is being fetched already")
	// ErrBadName: the name is not a plain .gguf file name.
	ErrBadName = errors.New("not a model file name")
	// ErrSource: the source sent something other than the file it
	// described (more bytes, a range it was not asked for).
	ErrSource = errors.New("the source misbehaved")
	// ErrMismatch: the bytes do not hash to what the source listed.
	ErrMismatch = errors.New("hash mismatch")
	// ErrNoSpace: the models dir's file system cannot hold the file.
	ErrNoSpace = errors.New("not enough free space in the models dir")
)

// Permanent marks an error of a Source that reopening cannot cure (the
// file is gone, access is refused): the fetch fails with err at once.
func Permanent(err error) error { return &permanentError{err} }

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// HashError is a fetched file whose bytes do not match what its source
// listed; the partial was discarded.
type HashError struct {
	Origin string
	What   string // "SHA-256", "weights digest"
	Want   string
	Got    string
}

func (e *HashError) Error() string {
	return fmt.Sprintf("%s of the file from %s is %s, but the source listed %s: the bytes were discarded", e.What, e.Origin, e.Got, e.Want)
}

// Unwrap makes a HashError ErrMismatch.
func (e *HashError) Unwrap() error { return ErrMismatch }

// Fetcher fetches files into one models dir. Its zero options are the
// defaults shown; it is safe for concurrent use, one fetch per name.
type Fetcher struct {
	// Dir is the models dir.
	Dir string
	// Attempts is how many times a cut-off download is reopened before
	// the fetch fails (5); every attempt that moved bytes resets the count.
	Attempts int
	// Backoff is the wait before the first reopen, doubling up to 30s (1s).
	Backoff time.Duration
	// Every is how often Progress is reported while bytes move (500ms).
	Every time.Duration
	// Now is the clock rates are measured on (time.Now).
	Now    func() time.Time
	Logger *slog.Logger

	mu     sync.Mutex
	active map[string]bool
}

// record is the partial's companion file: what its bytes are.
type record struct {
	Origin    string `json:"origin"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Version   string `json:"version"`
	Validator string `json:"validator,omitempty"`
}

// CheckName is name as a model file name: a plain file name (no path, not
// hidden) ending in .gguf, which is added when missing.
func CheckName(name string) (string, error) {
	if name == "" || len(name) > 250 || name[0] == '.' || strings.ContainsAny(name, `/\`) || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("%q: %w (a plain file name, not hidden, without / or control characters)", name, ErrBadName)
	}
	if !strings.EqualFold(filepath.Ext(name), ".gguf") {
		name += ".gguf"
	}
	return name, nil
}

// PartialPath is where a fetch of name keeps its partial file.
func (f *Fetcher) PartialPath(name string) string {
	return filepath.Join(f.Dir, PartialDir, name)
}

// Fetch fetches src into the models dir as name (".gguf" added when
// missing), resuming a partial an earlier Fetch left. progress, when not
// nil, is called from Fetch's goroutine.
func (f *Fetcher) Fetch(ctx context.Context, name string, src Source, progress func(Progress)) (Result, error) {
	name, err := CheckName(name)
	if err != nil {
		return Result{}, err
	}
	dest := filepath.Join(f.Dir, name)
	if _, err := os.Lstat(dest); err == nil {
		return Result{}, fmt.Errorf("%s: %w (remove it first to fetch it again)", dest, ErrExists)
	}
	if !f.claim(name) {
		return Result{}, fmt.Errorf("%s: %w", name, ErrBusy)
	}
	defer f.release(name)
	if progress == nil {
		progress = func(Progress) {}
	}
	meta, err := src.Describe(ctx)
	if err != nil {
		return Result{}, err
	}
	if meta.Size < 0 {
		return Result{}, fmt.Errorf("%s: %w: a negative size", src.Origin(), ErrSource)
	}
	if err := os.MkdirAll(filepath.Join(f.Dir, PartialDir), 0o755); err != nil {
		return Result{}, fmt.Errorf("models dir: %w", err)
	}
	part := f.PartialPath(name)
	file, rec, resumed, err := f.openPartial(part, src.Origin(), meta)
	if err != nil {
		return Result{}, err
	}
	defer file.Close()
	// A file the disk cannot hold (or a source that claims an absurd
	// size) is refused before a byte is written, not when the disk is full.
	if free, ok := freeSpace(f.Dir); ok && uint64(meta.Size-resumed) > free {
		return Result{}, fmt.Errorf("%s from %s: %w: it needs %d more bytes, %d are free", name, src.Origin(), ErrNoSpace, meta.Size-resumed, free)
	}
	if resumed > 0 {
		f.log().Info("resuming a partial download", "file", name, "from", src.Origin(), "have", resumed, "size", meta.Size)
	}
	kept, err := f.download(ctx, file, part, rec, src, meta, resumed, progress)
	if err != nil {
		return Result{}, err
	}
	if err := file.Sync(); err != nil {
		return Result{}, fmt.Errorf("%s: %w", part, err)
	}
	res, err := f.verify(ctx, file, name, src.Origin(), meta, progress)
	if err != nil {
		if errors.Is(err, ErrMismatch) {
			f.discard(part)
		}
		return Result{}, err
	}
	res.Resumed = kept
	if c, ok := src.(Checker); ok {
		if err := c.Check(res); err != nil {
			f.discard(part)
			return Result{}, err
		}
	}
	if err := file.Close(); err != nil {
		return Result{}, fmt.Errorf("%s: %w", part, err)
	}
	if err := place(part, dest); err != nil {
		return Result{}, err
	}
	os.Remove(recordPath(part))
	res.Path = dest
	progress(Progress{Phase: PhaseDone, Done: meta.Size, Total: meta.Size, Resumed: kept})
	return res, nil
}

func (f *Fetcher) claim(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active == nil {
		f.active = map[string]bool{}
	}
	if f.active[name] {
		return false
	}
	f.active[name] = true
	return true
}

// Busy reports whether a fetch of name (a file name) runs now.
func (f *Fetcher) Busy(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active[name]
}

func (f *Fetcher) release(name string) {
	f.mu.Lock()
	delete(f.active, name)
	f.mu.Unlock()
}

func (f *Fetcher) log() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger
}

func (f *Fetcher) now() time.Time {
	if f.Now == nil {
		return time.Now()
	}
	return f.Now()
}

func recordPath(part string) string { return part + ".json" }

// openPartial opens the partial file for meta, keeping the bytes an
// earlier fetch of the same version of the same file left (resumed), or
// starting it empty.
func (f *Fetcher) openPartial(part, origin string, meta Meta) (*os.File, *record, int64, error) {
	want := record{Origin: origin, Size: meta.Size, SHA256: hex.EncodeToString(meta.SHA256[:]), Version: meta.Version}
	file, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("partial file: %w", err)
	}
	var have record
	var resumed int64
	// The same version of the same file resumes from wherever it came:
	// another holder of it in the mesh has the same bytes. A validator is
	// its origin's own.
	if b, err := os.ReadFile(recordPath(part)); err == nil && json.Unmarshal(b, &have) == nil &&
		have.Size == want.Size && have.SHA256 == want.SHA256 && have.Version == want.Version {
		if st, err := file.Stat(); err == nil && st.Size() <= meta.Size {
			resumed = st.Size()
			if have.Origin == want.Origin {
				want.Validator = have.Validator
			}
		}
	} else if err == nil {
		f.log().Info("restarting a partial download: the file changed at its source, or the partial is another file's", "file", filepath.Base(part), "from", origin)
	}
	if resumed == 0 {
		if err := file.Truncate(0); err != nil {
			file.Close()
			return nil, nil, 0, fmt.Errorf("partial file: %w", err)
		}
	}
	if _, err := file.Seek(resumed, io.SeekStart); err != nil {
		file.Close()
		return nil, nil, 0, fmt.Errorf("partial file: %w", err)
	}
	if err := writeRecord(part, &want); err != nil {
		file.Close()
		return nil, nil, 0, err
	}
	return file, &want, resumed, nil
}

func writeRecord(part string, r *record) error {
	b, _ := json.Marshal(r)
	tmp := recordPath(part) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("partial record: %w", err)
	}
	if err := os.Rename(tmp, recordPath(part)); err != nil {
		return fmt.Errorf("partial record: %w", err)
	}
	return nil
}

// discard removes a partial whose bytes proved wrong, so that the next
// fetch starts afresh.
func (f *Fetcher) discard(part string) {
	os.Remove(part)
	os.Remove(recordPath(part))
}

// download fills file (positioned at have) up to meta.Size, reopening the
// source after a cut, and returns how many of the bytes it started with
// it kept (0 when the source made it start over).
func (f *Fetcher) download(ctx context.Context, file *os.File, part string, rec *record, src Source, meta Meta, have int64, progress func(Progress)) (int64, error) {
	kept := have
	attempts, backoff := f.Attempts, f.Backoff
	if attempts <= 0 {
		attempts = 5
	}
	if backoff <= 0 {
		backoff = time.Second
	}
	meter := newMeter(f.now, f.Every, have, meta.Size, have)
	meter.report(progress, PhaseDownload, have, true)
	buf := make([]byte, 1<<20)
	failures := 0
	for have < meta.Size {
		chunk, err := src.Open(ctx, have, meta, rec.Validator)
		if err == nil {
			if chunk.Start != have {
				if chunk.Start != 0 {
					chunk.Body.Close()
					return 0, fmt.Errorf("%s: %w: asked for bytes from %d, sent from %d", src.Origin(), ErrSource, have, chunk.Start)
				}
				f.log().Info("the source cannot resume: restarting the download", "file", filepath.Base(part), "from", src.Origin(), "had", have)
				if err := file.Truncate(0); err != nil {
					chunk.Body.Close()
					return 0, fmt.Errorf("partial file: %w", err)
				}
				if _, err := file.Seek(0, io.SeekStart); err != nil {
					chunk.Body.Close()
					return 0, fmt.Errorf("partial file: %w", err)
				}
				have, kept = 0, 0
			}
			if chunk.Validator != rec.Validator {
				rec.Validator = chunk.Validator
				if err := writeRecord(part, rec); err != nil {
					chunk.Body.Close()
					return 0, err
				}
			}
			var n int64
			n, err = copyChunk(file, chunk.Body, meta.Size-have, buf, func(n int64) { meter.report(progress, PhaseDownload, have+n, false) })
			chunk.Body.Close()
			have += n
			if n > 0 {
				failures = 0
			}
			if errors.Is(err, ErrSource) || errors.Is(err, errWrite) {
				return 0, fmt.Errorf("%s: %w", src.Origin(), err)
			}
			if err == nil && have < meta.Size {
				err = fmt.Errorf("the connection ended at byte %d of %d", have, meta.Size)
			}
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("download of %s stopped at byte %d of %d (the next pull resumes there): %w", src.Origin(), have, meta.Size, ctx.Err())
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return 0, perm.err
		}
		failures++
		if failures >= attempts {
			return 0, fmt.Errorf("download of %s failed %d times in a row, at byte %d of %d (the next pull resumes there): %w", src.Origin(), failures, have, meta.Size, err)
		}
		f.log().Warn("download cut off: resuming", "from", src.Origin(), "at", have, "size", meta.Size, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("download of %s stopped at byte %d of %d (the next pull resumes there): %w", src.Origin(), have, meta.Size, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	meter.report(progress, PhaseDownload, have, true)
	return kept, nil
}

// errWrite marks a failure to write the partial: the disk's, not the source's.
var errWrite = errors.New("writing the partial file")

// copyChunk copies at most left bytes of r to w; a source that sends more
// is ErrSource. It returns the bytes written.
func copyChunk(w io.Writer, r io.Reader, left int64, buf []byte, tick func(int64)) (int64, error) {
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			if int64(m) > left-n {
				return n, fmt.Errorf("%w: it sent more bytes than the file's size", ErrSource)
			}
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, fmt.Errorf("%w: %w", errWrite, werr)
			}
			n += int64(m)
			tick(n)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// verify hashes the whole partial and checks it against meta.
func (f *Fetcher) verify(ctx context.Context, file *os.File, name, origin string, meta Meta, progress func(Progress)) (Result, error) {
	if st, err := file.Stat(); err != nil {
		return Result{}, err
	} else if st.Size() != meta.Size {
		return Result{}, fmt.Errorf("%s: the partial holds %d bytes, the file has %d", origin, st.Size(), meta.Size)
	}
	sh, bh := sha256.New(), blake3.New()
	meter := newMeter(f.now, f.Every, 0, meta.Size, 0)
	buf := make([]byte, 1<<20)
	var done int64
	for done < meta.Size {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("verifying %s: %w", name, err)
		}
		n, err := file.ReadAt(buf[:min(int64(len(buf)), meta.Size-done)], done)
		if n > 0 {
			sh.Write(buf[:n])
			bh.Write(buf[:n])
			done += int64(n)
			meter.report(progress, PhaseVerify, done, false)
		}
		if err != nil && !(err == io.EOF && done == meta.Size) {
			return Result{}, fmt.Errorf("verifying %s: %w", name, err)
		}
	}
	meter.report(progress, PhaseVerify, done, true)
	res := Result{Name: name, Size: meta.Size}
	sh.Sum(res.SHA256[:0])
	if !bytes.Equal(res.SHA256[:], meta.SHA256[:]) {
		return Result{}, &HashError{Origin: origin, What: "SHA-256", Want: hex.EncodeToString(meta.SHA256[:]), Got: hex.EncodeToString(res.SHA256[:])}
	}
	bh.Sum(res.BLAKE3[:0])
	w, err := digest.Root([]digest.Entry{{Path: name, Sum: res.BLAKE3, Size: meta.Size}})
	if err != nil {
		return Result{}, err
	}
	res.Weights = w
	return res, nil
}

// place puts the verified partial at dest without replacing a file that
// appeared there meanwhile, and makes the link durable.
func place(part, dest string) error {
	if err := os.Link(part, dest); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w (it appeared while fetching; the verified copy stays at %s)", dest, ErrExists, part)
		}
		// A file system without hard links: rename, after checking.
		if _, serr := os.Lstat(dest); serr == nil {
			return fmt.Errorf("%s: %w", dest, ErrExists)
		}
		if err := os.Rename(part, dest); err != nil {
			return fmt.Errorf("placing %s: %w", dest, err)
		}
	} else {
		os.Remove(part)
	}
	for _, dir := range []string{filepath.Dir(dest), filepath.Dir(part)} {
		if d, err := os.Open(dir); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// meter paces progress reports and measures the rate over a window.
type meter struct {
	now     func() time.Time
	every   time.Duration
	total   int64
	resumed int64
	last    time.Time
	samples []sample
}

type sample struct {
	at   time.Time
	done int64
}

// rateWindow is how far back the rate looks.
const rateWindow = 5 * time.Second

func newMeter(now func() time.Time, every time.Duration, start, total, resumed int64) *meter {
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	return &meter{now: now, every: every, total: total, resumed: resumed, samples: []sample{{now(), start}}}
}

func (m *meter) report(progress func(Progress), phase string, done int64, force bool) {
	t := m.now()
	if !force && t.Sub(m.last) < m.every {
		return
	}
	m.last = t
	m.samples = append(m.samples, sample{t, done})
	for len(m.samples) > 2 && t.Sub(m.samples[1].at) >= rateWindow {
		m.samples = m.samples[1:]
	}
	p := Progress{Phase: phase, Done: done, Total: m.total, Resumed: m.resumed}
	first := m.samples[0]
	if dt := t.Sub(first.at).Seconds(); dt > 0 && done > first.done {
		p.Rate = float64(done-first.done) / dt
		p.ETA = time.Duration(float64(m.total-done) / p.Rate * float64(time.Second))
	}
	progress(p)
}
