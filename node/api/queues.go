package api

import (
	"slices"
	"strings"
)

// QueueState is one model's admission queue.
type QueueState struct {
	Model   string
	Running int // generations holding a slot
	Waiting int // admitted and waiting for one
}

// Queues reports the queue of each local model that has had a request
// since the server started, by model name: the node's metrics read it at
// each scrape.
func (s *Server) Queues() []QueueState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]QueueState, 0, len(s.limits))
	for model, l := range s.limits {
		running := l.runningCount()
		out = append(out, QueueState{Model: model, Running: running, Waiting: max(0, l.admittedCount()-running)})
	}
	slices.SortFunc(out, func(a, b QueueState) int { return strings.Compare(a.Model, b.Model) })
	return out
}
