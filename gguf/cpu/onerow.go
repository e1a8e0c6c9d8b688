package cpu

import (
	"time"

	"github.com/meshnode/meshnode/gguf/quant"
)

// A decoded token multiplies each weight by one activation row. Where the
// weights are read from memory, quant has up to three ways to do it, and
// which is fastest depends on the CPU and the row width:
//
//   - the sixteen-row band kernels, which repack the rows as they read
//     them (quant.StreamedBand): on an Intel Xeon they kept more reads in
//     flight (1.14–1.78× the row kernels on a 1B model's feed-forward
//     matrices); on an AMD EPYC their repacking made them the slower
//     (0.44–0.68×; a 1B Q4_0 model decoded at 0.6× llama.cpp's rate);
//   - the row kernels, a row at a time, left to the hardware's prefetchers;
//   - the row kernels asking for the rows 8 KB ahead (quant.RowsAhead): on
//     the EPYC 1.8× as fast on Q8_0 rows of 2016 elements, 0.6× on rows of
//     8192.
//
// So the backend times each candidate on each weight's first products and
// keeps the fastest for the rest of its life (OneRowTuned), unless
// Options.OneRow fixes the choice. All give the same bits, so the choice
// changes only the speed.

// OneRow chooses the kernels of one-row products by weights read from
// memory.
type OneRow int

// The choices.
const (
	// OneRowTuned times the candidates on each weight's first products
	// and keeps the fastest.
	OneRowTuned OneRow = iota
	// OneRowBand: the band kernels where the weight's type has them
	// (quant's rule), else the row kernels.
	OneRowBand
	// OneRowRows: always the row kernels, left to the hardware's
	// prefetchers.
	OneRowRows
	// OneRowAhead: always the row kernels, asking for the rows ahead
	// where they can.
	OneRowAhead
)

// The kinds of kernels a one-row product takes, in the order ties go.
const (
	kindBand = iota
	kindRows
	kindAhead
	kinds
)

// tuneRounds is how many timed products of each candidate decide a
// weight: after one untimed product (its pages' first touch), they take
// turns.
const tuneRounds = 3

// oneRowTune is a weight's choice for its one-row products.
type oneRowTune struct {
	cands []int // the candidate kinds, in kind order (choices)
	found bool  // cands is set
	calls int
	least [kinds]time.Duration
	done  bool
	kind  int // the choice, once done
}

// candidates are the kinds a one-row product by w read from memory may
// take here: none where there is only one.
func candidates(w *weight) []int {
	c := make([]int, 0, kinds)
	if quant.StreamedBand(w.typ, w.cols) {
		c = append(c, kindBand)
	}
	c = append(c, kindRows)
	if quant.RowsAhead(w.typ, w.cols) {
		c = append(c, kindAhead)
	}
	if len(c) == 1 {
		return nil
	}
	return c
}

// choices are w's candidates, found at its first one-row product from
// memory.
func (t *oneRowTune) choices(w *weight) []int {
	if !t.found {
		t.cands, t.found = candidates(w), true
	}
	return t.cands
}

// fixed is the kind a fixed mode takes among cands.
func fixed(mode OneRow, cands []int) int {
	switch mode {
	case OneRowBand:
		return cands[0] // the band kernels where they are candidates, else the rows
	case OneRowAhead:
		return cands[len(cands)-1] // the asks where they are candidates, else the rows or the band
	}
	return kindRows
}

// next says which kind the weight's next one-row product takes, and
// whether to time it; t.cands must have a choice.
func (t *oneRowTune) next(mode OneRow) (kind int, timed bool) {
	switch {
	case mode != OneRowTuned:
		return fixed(mode, t.cands), false
	case t.done:
		return t.kind, false
	case t.calls == 0:
		return t.cands[0], false
	}
	return t.cands[(t.calls-1)%len(t.cands)], true
}

// record counts a product that next chose, and its time where it was
// timed; after tuneRounds of each candidate the least times decide, a tie
// for the earlier kind. It reports whether this product decided.
func (t *oneRowTune) record(kind int, timed bool, d time.Duration) bool {
	if t.done {
		return false
	}
	t.calls++
	if timed && (t.least[kind] == 0 || d < t.least[kind]) {
		t.least[kind] = d
	}
	if t.calls <= tuneRounds*len(t.cands) {
		return false
	}
	t.done, t.kind = true, t.cands[0]
	for _, k := range t.cands[1:] {
		if t.least[k] < t.least[t.kind] {
			t.kind = k
		}
	}
	return true
}

// OneRowChoices counts the weights whose one-row kernels are decided, by
// what they took: the band kernels, the row kernels, the row kernels with
// their asks.
func (b *Backend) OneRowChoices() (band, rows, ahead int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.chosen[kindBand], b.chosen[kindRows], b.chosen[kindAhead]
}

// StreamedPacked is how many weights read from memory have been packed
// once for every product (weight.packed; Options.RepackStreamed): their
// one-row products are not timed.
func (b *Backend) StreamedPacked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streamed
}
