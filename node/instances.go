package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// instance is one loaded model: its id (an owner's unload or drain may
// name it), the model, and the gate its work passes through.
type instance struct {
	id   string
	m    localModel
	gate *gate
}

// modelSet is the node's loaded models. Models come and go at run time
// (owner control's load, unload and drain), so every reader takes a
// snapshot.
type modelSet struct {
	mu     sync.RWMutex
	list   []*instance // in load order: the first is the primary
	byName map[string]*instance
	seq    int
}

func (s *modelSet) add(m localModel) (*instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.byName[m.Name()]; dup {
		return nil, fmt.Errorf("model %q is already loaded", m.Name())
	}
	if s.byName == nil {
		s.byName = map[string]*instance{}
	}
	s.seq++
	in := &instance{id: fmt.Sprintf("%s#%d", m.Name(), s.seq), m: m, gate: newGate()}
	s.list = append(s.list, in)
	s.byName[m.Name()] = in
	return in, nil
}

// remove takes an instance out of service: new requests no longer find
// it. The caller closes it once its work is done.
func (s *modelSet) remove(id string) (*instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, in := range s.list {
		if in.id == id {
			s.list = append(s.list[:i:i], s.list[i+1:]...)
			delete(s.byName, in.m.Name())
			return in, true
		}
	}
	return nil, false
}

func (s *modelSet) get(name string) (*instance, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	in, ok := s.byName[name]
	return in, ok
}

func (s *modelSet) byID(id string) (*instance, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, in := range s.list {
		if in.id == id {
			return in, true
		}
	}
	return nil, false
}

// all returns the loaded instances in load order.
func (s *modelSet) all() []*instance {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*instance(nil), s.list...)
}

func (s *modelSet) names() []string {
	all := s.all()
	names := make([]string, len(all))
	for i, in := range all {
		names[i] = in.m.Name()
	}
	return names
}

// errDraining refuses work to a model that is draining or unloading.
var errDraining = errors.New("model is draining: it finishes the work it has and takes no more")

// gate admits work to one instance, counts what is in flight, and lets
// owner control drain it: refuse new work, wait for the admitted work,
// or cancel it.
type gate struct {
	mu       sync.Mutex
	closed   bool
	inflight map[*int]context.CancelFunc
	idle     chan struct{} // made when the gate closes; closed once nothing is in flight
}

func newGate() *gate { return &gate{inflight: map[*int]context.CancelFunc{}} }

// enter admits one piece of work: its context is cancelled by a forced
// drain, and leave must be called when it is done.
func (g *gate) enter(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, nil, errDraining
	}
	ctx, cancel := context.WithCancel(ctx)
	key := new(int)
	g.inflight[key] = cancel
	return ctx, func() {
		cancel()
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.inflight, key)
		g.signalIdle()
	}, nil
}

// signalIdle closes idle once a closed gate has nothing in flight.
func (g *gate) signalIdle() {
	if g.closed && len(g.inflight) == 0 && g.idle != nil {
		select {
		case <-g.idle:
		default:
			close(g.idle)
		}
	}
}

// drain closes the gate and returns the handle owner control drives.
func (g *gate) drain() *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.idle = make(chan struct{})
		g.signalIdle()
	}
	return g
}

// Idle is closed once a drained gate has no work in flight.
func (g *gate) Idle() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.idle
}

// Cancel cancels every admitted piece of work.
func (g *gate) Cancel() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, cancel := range g.inflight {
		cancel()
	}
}

// Resume opens the gate again: the drain was called off.
func (g *gate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed, g.idle = false, nil
}

// inFlight is how many pieces of work the gate holds.
func (g *gate) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.inflight)
}
