package cpu

import (
	"time"

	"github.com/meshnode/meshnode/gguf/quant"
)

// A decoded token multiplies each weight by one activation row. Where the
// weights are read from memory, quant's sixteen-row band kernels, which
// repack the rows as they read them, and its row kernels are both
// candidates (quant.StreamedBand), and which is faster depends on the CPU:
// on an Intel Xeon the band kernels kept more reads in flight (1.14–1.78×
// the row kernels on a 1B model's feed-forward matrices), on an AMD EPYC
// their repacking made them the slower (0.44–0.68×; a 1B Q4_0 model
// decoded at 0.6× llama.cpp's rate). So the backend times both on each
// weight's first products and keeps the faster for the rest of its life
// (OneRowTuned), unless Options.OneRow fixes the choice. Both give the
// same bits, so the choice changes only the speed.

// OneRow chooses the kernels of one-row products by weights read from
// memory.
type OneRow int

// The choices.
const (
	// OneRowTuned times both on each weight's first products and keeps
	// the faster.
	OneRowTuned OneRow = iota
	// OneRowBand: always the band kernels (quant's rule).
	OneRowBand
	// OneRowRows: always the row kernels.
	OneRowRows
)

// tuneRounds is how many timed products of each kind decide a weight:
// after one untimed product (its pages' first touch), they alternate.
const tuneRounds = 3

// oneRowTune is a weight's choice for its one-row products.
type oneRowTune struct {
	calls int
	least [2]time.Duration // by kind: 0 the band kernels, 1 the rows
	done  bool
	rows  bool // the choice, once done
}

// next says which kernels the weight's next one-row product takes, and
// whether to time it.
func (t *oneRowTune) next(mode OneRow) (rows, timed bool) {
	switch {
	case mode != OneRowTuned:
		return mode == OneRowRows, false
	case t.done:
		return t.rows, false
	case t.calls == 0:
		return false, false
	}
	return t.calls%2 == 0, true
}

// record counts a product that next chose, and its time where it was
// timed; after tuneRounds of each kind the least times decide, a tie for
// the band kernels. It reports whether this product decided.
func (t *oneRowTune) record(rows, timed bool, d time.Duration) bool {
	if t.done {
		return false
	}
	t.calls++
	if timed {
		i := 0
		if rows {
			i = 1
		}
		if t.least[i] == 0 || d < t.least[i] {
			t.least[i] = d
		}
	}
	if t.calls > 2*tuneRounds {
		t.done, t.rows = true, t.least[1] < t.least[0]
		return true
	}
	return false
}

// streamedOneRow reports whether a product of n rows by w has the choice:
// one row, weights read from memory and not packed, a band kernel here.
func streamedOneRow(w *weight, n int, cached bool) bool {
	return n == 1 && !cached && quant.StreamedBand(w.typ, w.cols)
}

// OneRowChoices counts the weights whose one-row kernels are decided:
// those that keep the band kernels and those that took the row kernels.
func (b *Backend) OneRowChoices() (band, rows int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.chosen[0], b.chosen[1]
}
