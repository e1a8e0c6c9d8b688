package tokenizer

// heap is a binary heap ordered by before (the element that pops first
// sorts before the others). It is reused across words to save allocations.
type heap[T any] struct {
	items  []T
	before func(a, b T) bool
}

func (h *heap[T]) reset(before func(a, b T) bool) {
	h.items, h.before = h.items[:0], before
}

func (h *heap[T]) len() int { return len(h.items) }

func (h *heap[T]) push(x T) {
	h.items = append(h.items, x)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.before(h.items[i], h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *heap[T]) pop() T {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < last && h.before(h.items[l], h.items[best]) {
			best = l
		}
		if r := l + 1; r < last && h.before(h.items[r], h.items[best]) {
			best = r
		}
		if best == i {
			break
		}
		h.items[i], h.items[best] = h.items[best], h.items[i]
		i = best
	}
	return top
}
