package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshnode/meshnode/node/receipt"
)

// Checkpoint is how far the journal had been made durable: its record
// count, its length in bytes and the hash of its last record. It is kept
// in a file of its own beside the journal (see [HeadPath]) and advanced
// after every append, so that a journal shorter than what the steward
// wrote, or a different one, is caught when it is opened (§2.2 leaves a cut
// from the end undetectable from the journal alone).
type Checkpoint struct {
	Records uint64
	Size    int64
	// Head is the hash of record Records-1; zero when Records is 0.
	Head receipt.ContentID
}

func (c Checkpoint) String() string {
	if c.Records == 0 {
		return "0 records"
	}
	return fmt.Sprintf("%d records, %d bytes, last record %s", c.Records, c.Size, c.Head)
}

// HeadPath is the checkpoint file of the journal at path: the journal's
// name with its extension replaced by .head (steward.jsonl →
// steward.head).
func HeadPath(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".head"
}

// The checkpoint file holds two fixed-size slots, written alternately in
// place (pwrite, then fsync). Each slot carries a generation and a CRC, so
// a write torn by a crash spoils only the slot being written and the other
// still holds the checkpoint before it, which a journal one record longer
// satisfies. One write and one sync per append, with no change to the
// file's size or its directory entry; temp-file+rename+directory-sync
// would cost three syncs and a metadata change each time. The slots sit a
// page apart, so writing one never rewrites the page holding the other.
const (
	slotStride = 4096
	slotLen    = 8 + 8 + 8 + 8 + 32 + 4 // magic, generation, records, size, head, CRC
	headLen    = slotStride + slotLen
)

var (
	slotMagic  = [8]byte{'m', 'n', 'j', 'h', 'e', 'a', 'd', '1'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

func encodeSlot(gen uint64, c Checkpoint) []byte {
	b := make([]byte, slotLen)
	copy(b, slotMagic[:])
	binary.BigEndian.PutUint64(b[8:], gen)
	binary.BigEndian.PutUint64(b[16:], c.Records)
	binary.BigEndian.PutUint64(b[24:], uint64(c.Size))
	copy(b[32:64], c.Head[:])
	binary.BigEndian.PutUint32(b[64:], crc32.Checksum(b[:64], castagnoli))
	return b
}

func decodeSlot(b []byte) (gen uint64, c Checkpoint, ok bool) {
	if len(b) < slotLen || [8]byte(b[:8]) != slotMagic || binary.BigEndian.Uint32(b[64:]) != crc32.Checksum(b[:64], castagnoli) {
		return 0, Checkpoint{}, false
	}
	c = Checkpoint{Records: binary.BigEndian.Uint64(b[16:]), Size: int64(binary.BigEndian.Uint64(b[24:]))}
	copy(c.Head[:], b[32:64])
	return binary.BigEndian.Uint64(b[8:]), c, true
}

// headFile is an open checkpoint file. Only the holder of the journal's
// lock writes it.
type headFile struct {
	path string
	f    *os.File
	gen  uint64 // generation of the newest slot
}

// readHead reads the checkpoint at path: the newest slot whose CRC holds.
// A file that does not exist returns an error wrapping fs.ErrNotExist; one
// with no whole slot, ErrBadCheckpoint.
func readHead(path string) (*headFile, Checkpoint, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, Checkpoint{}, fmt.Errorf("open checkpoint: %w", err)
	}
	buf := make([]byte, headLen)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, Checkpoint{}, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	buf = buf[:n]
	var (
		best  Checkpoint
		gen   uint64
		found bool
	)
	for off := 0; off+slotLen <= len(buf); off += slotStride {
		if g, c, ok := decodeSlot(buf[off : off+slotLen]); ok && (!found || g > gen) {
			best, gen, found = c, g, true
		}
	}
	if !found {
		f.Close()
		return nil, Checkpoint{}, fmt.Errorf("%w: %s holds no intact checkpoint (%d bytes)", ErrBadCheckpoint, path, n)
	}
	return &headFile{path: path, f: f, gen: gen}, best, nil
}

// createHead writes a checkpoint file at path holding c in both slots,
// through a synced temporary file renamed into place, so that it appears
// whole or not at all and replaces any file there. The caller syncs the
// directory.
func createHead(path string, c Checkpoint) (*headFile, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	buf := make([]byte, headLen)
	copy(buf, encodeSlot(0, c))
	copy(buf[slotStride:], encodeSlot(1, c))
	_, err = tmp.Write(buf) // CreateTemp made it 0600
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create checkpoint %s: %w", path, err)
	}
	return &headFile{path: path, f: tmp, gen: 1}, nil
}

// store writes c into the older slot and syncs it with sync.
func (h *headFile) store(c Checkpoint, sync func(*os.File) error) error {
	gen := h.gen + 1
	if _, err := h.f.WriteAt(encodeSlot(gen, c), int64(gen%2)*slotStride); err != nil {
		return err
	}
	if err := sync(h.f); err != nil {
		return err
	}
	h.gen = gen
	return nil
}

func (h *headFile) close() error {
	if h == nil || h.f == nil {
		return nil
	}
	err := h.f.Close()
	h.f = nil
	return err
}

// openHead reads the checkpoint beside a journal; a missing file is
// (nil, zero, nil).
func openHead(path string) (*headFile, Checkpoint, error) {
	h, c, err := readHead(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Checkpoint{}, nil
	}
	return h, c, err
}
