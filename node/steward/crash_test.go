//go:build unix

package steward

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/internal/racebuild"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// The crash test runs a steward as a real child process (this test binary
// again, with crashChildEnv naming its journal), serving granted requests
// on the reference engine from two workers, and SIGKILLs it at random
// points: while it sleeps just after a durable append (authorised,
// debited, sealed), mid-serve inside the engine, or at a random time. After
// every kill the parent replays the journal itself and checks the §2.2
// invariants; then a new child continues, first re-presenting the serves
// the last one left in flight.
const (
	crashChildEnv = "MESHNODE_STEWARD_CRASH_JOURNAL"
	crashStartEnv = "MESHNODE_STEWARD_CRASH_START"
	crashSeedEnv  = "MESHNODE_STEWARD_CRASH_SEED"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChild(path))
	}
	os.Exit(m.Run())
}

// The crash cast: deterministic keys, so parent and child agree on them.
const crashCeilingUJ, crashMeteredUJ = 5_000, 1_000

func crashChain(tb testing.TB) grant.Chain {
	root, err := grant.Issue(grant.Issuance{Issuer: testKey(tb, 10), Subject: testKey(tb, 11).DIDKey(), BudgetUJ: 1 << 50,
		Expiry: t0.Add(24 * time.Hour), Rand: &counterReader{n: 1}})
	if err != nil {
		tb.Fatal(err)
	}
	chain, err := grant.Issue(grant.Issuance{Issuer: testKey(tb, 11), Subject: testKey(tb, 1).DIDKey(), BudgetUJ: 1 << 49,
		Expiry: t0.Add(24 * time.Hour), Parent: root, Rand: &counterReader{n: 2}})
	if err != nil {
		tb.Fatal(err)
	}
	return chain
}

// crashRequest is serve k's request: its own prompt, a tiny generation.
func crashRequest(k uint64) receipt.ServeRequest {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], k)
	return receipt.ServeRequest{PromptHash: receipt.PromptHash(b[:]), PromptTokens: 4, MaxTokens: 4, FidelityFloor: receipt.F1, JouleCeilingUJ: crashCeilingUJ}
}

// crashNonce is serve k's presentation nonce, so a presentation names its
// serve and presenting k again reproduces it exactly.
func crashNonce(k uint64) [16]byte {
	var n [16]byte
	binary.BigEndian.PutUint64(n[8:], k)
	return n
}

func nonceK(n [16]byte) uint64 { return binary.BigEndian.Uint64(n[8:]) }

// childTB is the little of testing.TB the child's helpers need.
type childTB struct{ testing.TB }

func (childTB) Helper()           {}
func (childTB) Fatal(args ...any) { fmt.Println("error fatal", fmt.Sprint(args...)); os.Exit(2) }
func (childTB) Fatalf(f string, a ...any) {
	fmt.Println("error fatal", fmt.Sprintf(f, a...))
	os.Exit(2)
}

// sleepyEngine pauses mid-serve, so kills land inside the engine.
type sleepyEngine struct {
	*engine.Reference
	pause func()
}

func (e sleepyEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	e.pause()
	return e.Reference.Serve(ctx, req, prompt, emit)
}

func crashChild(path string) int {
	tb := childTB{}
	start, _ := strconv.ParseUint(os.Getenv(crashStartEnv), 10, 64)
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	rnd := rand.New(rand.NewPCG(seed, 7))
	var mu sync.Mutex // guards rnd and stdout
	// Each line is one write(2), made before the child goes on, so a line
	// the parent has not read was never acted on, and a kill never splits
	// one.
	say := func(format string, a ...any) {
		mu.Lock()
		os.Stdout.WriteString(fmt.Sprintf(format, a...) + "\n")
		mu.Unlock()
	}
	pause := func() {
		mu.Lock()
		d := time.Duration(rnd.IntN(300)) * time.Microsecond
		mu.Unlock()
		time.Sleep(d)
	}
	j, err := journal.Open(path, journal.Options{AfterAppend: func(r journal.Record) {
		say("rec %d %s", r.Seq, r.Entry.Kind())
		pause() // a window for a kill just after a durable append
	}})
	if err != nil {
		fmt.Println("refused", err)
		return 3
	}
	s, err := New(Config{
		Key: testKey(tb, 1), Durable: j, Now: func() time.Time { return t0 },
		Meter:    &fakeMeter{energy: hw.Estimated(crashMeteredUJ)},
		Backends: []Backend{{Name: "ref", Engine: sleepyEngine{engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F2, UJPerToken: 1}), pause}}},
	})
	if err != nil {
		fmt.Println("refused", err)
		return 3
	}
	chain := crashChain(tb)
	caller := testKey(tb, 11)
	head := s.Head()
	say("ready %d %s", head.Next, head.Last)
	next := atomic.Uint64{}
	next.Store(start)
	worker := func() {
		for {
			k := next.Add(1) - 1
			req := crashRequest(k)
			id, _ := req.ID()
			n := crashNonce(k)
			p, err := grant.Present(chain, caller, id, strings.NewReader(string(n[:])))
			if err != nil {
				say("error %d %v", k, err)
				return
			}
			say("start %d", k)
			served, err := s.Serve(context.Background(), req, []uint32{1, 2, 3, 4}, nil, WithPresentation(p))
			switch {
			case errors.Is(err, grant.ErrSpent):
				say("spent %d", k)
			case err != nil:
				say("error %d %v", k, err)
			default:
				say("done %d %d %x", k, served.Receipt.Receipt.Sequence, served.Receipt.Envelope)
			}
		}
	}
	go worker()
	worker()
	return 0
}

// crashRun is what the parent saw of one child.
type crashRun struct {
	ready   bool
	head    string
	started map[uint64]bool
	done    map[uint64]uint64 // k → receipt sequence
	envs    map[uint64][]byte // sequence → envelope handed out
	spent   map[uint64]bool
	errors  []string
}

// crashJournal is the parent's own reading of the journal.
type crashJournal struct {
	authorised map[uint64]uint64 // record seq → k
	byK        map[uint64]int    // k → authorisations
	debited    map[uint64]bool   // authorisation record seqs
	sealed     []receipt.ContentID
	debitedUJ  uint64
}

func readCrashJournal(t *testing.T, j *journal.Journal) crashJournal {
	t.Helper()
	c := crashJournal{authorised: map[uint64]uint64{}, byK: map[uint64]int{}, debited: map[uint64]bool{}}
	err := j.Replay(func(r journal.Record) error {
		switch e := r.Entry; {
		case e.Authorised != nil:
			p, err := grant.ParsePresentation(e.Authorised.Presentation)
			if err != nil {
				return err
			}
			k := nonceK(p.Nonce)
			c.authorised[r.Seq] = k
			c.byK[k]++
		case e.Debited != nil:
			c.debited[e.Debited.Auth] = true
			en, _ := e.Debited.Energy()
			c.debitedUJ += en.UJ()
		case e.Sealed != nil:
			c.sealed = append(c.sealed, e.Sealed.Envelope)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCrashKill(t *testing.T) {
	// 220 kill points in a plain run (the issue asks for 200 or more in
	// CI); fewer under -short and the race detector, which slows every
	// child several times over.
	killPoints, perJournal := 220, 22
	if testing.Short() || racebuild.Enabled {
		killPoints = 44
	}
	began := time.Now()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	seed := rnd.Uint64()
	t.Logf("seed %d", seed)
	rnd = rand.New(rand.NewPCG(seed, 1))
	chain := crashChain(t)
	var (
		path       string
		nextK      uint64
		lastTotal  uint64
		lastHead   receipt.Head
		sawBefore  int // kills before an in-flight serve was authorised
		sawUnres   int // kills that left a serve unresolved
		sawDebited int // kills after a debit, before the hand-out
		sawSealed  int // kills after a receipt was sealed, before its hand-out
		serves     int
		before     crashBefore // the journal as the last kill left it
	)
	for kill := 0; kill < killPoints; kill++ {
		if kill%perJournal == 0 { // a fresh journal keeps each replay short
			path = filepath.Join(t.TempDir(), "journal", "steward.jsonl")
			nextK, lastTotal, lastHead = 0, 0, receipt.Head{}
			before = crashBefore{byK: map[uint64]int{}, authorised: map[uint64]uint64{}}
		}
		run := runCrashChild(t, path, nextK, rnd)
		if len(run.errors) > 0 {
			t.Fatalf("kill %d: child errors: %v", kill, run.errors)
		}
		if !run.ready {
			t.Fatalf("kill %d: child never became ready", kill)
		}
		if want := fmt.Sprintf("%d %s", lastHead.Next, lastHead.Last); run.head != want {
			t.Fatalf("kill %d: child resumed at %q, want %q", kill, run.head, want)
		}

		// The parent replays the journal through a steward of its own.
		j, err := journal.Open(path, journal.Options{})
		if err != nil {
			t.Fatalf("kill %d: %v", kill, err)
		}
		s, err := New(Config{Key: testKey(t, 1), Durable: j, Meter: &fakeMeter{}, Backends: []Backend{{Name: "ref", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F2, UJPerToken: 1})}}})
		if err != nil {
			t.Fatalf("kill %d: replay refused the journal: %v", kill, err)
		}
		after := readCrashJournal(t, j)

		// No presentation spends twice; a re-presented serve spends only
		// if it was never authorised.
		for k, n := range after.byK {
			if n > 1 {
				t.Fatalf("kill %d: serve %d authorised %d times", kill, k, n)
			}
		}
		for k := range run.spent {
			if before.byK[k] == 0 {
				t.Fatalf("kill %d: serve %d refused as spent but was never authorised before", kill, k)
			}
		}
		for k := range run.done {
			if before.byK[k] != 0 {
				t.Fatalf("kill %d: serve %d served again after it was authorised", kill, k)
			}
		}

		// Unresolved: exactly the authorisations without a debit, each a
		// serve in flight in the run that created it.
		unresolved := map[uint64]bool{}
		for _, u := range s.Grants().Unresolved {
			unresolved[u.Record] = true
		}
		var ceilings uint64
		for seq, k := range after.authorised {
			if after.debited[seq] == unresolved[seq] { // exactly one of the two
				t.Fatalf("kill %d: authorisation %d (serve %d): debited %v, unresolved %v", kill, seq, k, after.debited[seq], unresolved[seq])
			}
			if unresolved[seq] {
				ceilings += crashCeilingUJ
				if _, old := before.authorised[seq]; !old {
					if _, done := run.done[k]; !run.started[k] || done {
						t.Fatalf("kill %d: serve %d is unresolved but was not in flight", kill, k)
					}
					sawUnres++
				}
			}
		}
		if len(unresolved) != len(after.authorised)-len(after.debited) {
			t.Fatalf("kill %d: %d unresolved, want %d", kill, len(unresolved), len(after.authorised)-len(after.debited))
		}

		// Spend never falls, and is what the journal says.
		acc, _ := s.Account(chain.Leaf().ID)
		total := acc.DebitedUJ + acc.HeldUJ
		if total < lastTotal || acc.DebitedUJ != after.debitedUJ+ceilings || acc.HeldUJ != 0 {
			t.Fatalf("kill %d: spend %+v (was %d), journal debited %d, unresolved ceilings %d", kill, acc, lastTotal, after.debitedUJ, ceilings)
		}
		lastTotal = total

		// The chain continues without a gap or a fork: every receipt handed
		// out is the journal's at its sequence and chains to the one before.
		head := s.Head()
		if head.Next != uint64(len(after.sealed)) || len(after.sealed) > 0 && head.Last != after.sealed[len(after.sealed)-1] || head.Next < lastHead.Next {
			t.Fatalf("kill %d: head %+v, journal has %d receipts (was %d)", kill, head, len(after.sealed), lastHead.Next)
		}
		for seq, env := range run.envs {
			sealed, err := receipt.Open(env, testKey(t, 1).Public())
			if err != nil || sealed.Receipt.Sequence != seq || seq >= uint64(len(after.sealed)) || sealed.ID != after.sealed[seq] {
				t.Fatalf("kill %d: receipt %d handed out is not the journal's: %v", kill, seq, err)
			}
			if seq > 0 && *sealed.Receipt.Prev != after.sealed[seq-1] || seq == 0 && sealed.Receipt.Prev != nil {
				t.Fatalf("kill %d: receipt %d does not chain to receipt %d", kill, seq, seq-1)
			}
			if sealed.Receipt.GrantID == nil || *sealed.Receipt.GrantID != chain.Leaf().ID {
				t.Fatalf("kill %d: receipt %d names grant %v", kill, seq, sealed.Receipt.GrantID)
			}
			if err := s.Witness(env); err != nil {
				t.Fatalf("kill %d: witness of receipt %d: %v", kill, seq, err)
			}
		}
		lastHead = head
		j.Close()

		// Where the kill landed, for the coverage figures.
		inFlight := map[uint64]bool{}
		for k := range run.started {
			if _, done := run.done[k]; !done && !run.spent[k] {
				inFlight[k] = true
			}
		}
		authorisedK := map[uint64]uint64{}
		for seq, k := range after.authorised {
			authorisedK[k] = seq
		}
		handedOut := map[uint64]bool{}
		for seq := range run.envs {
			handedOut[seq] = true
		}
		minK := nextK + uint64(len(run.started))
		for k := range inFlight {
			seq, ok := authorisedK[k]
			switch {
			case !ok:
				sawBefore++
			case after.debited[seq]:
				sawDebited++
			}
			minK = min(minK, k)
		}
		for seq := range after.sealed {
			if seq >= int(before.sealedN) && !handedOut[uint64(seq)] {
				sawSealed++
			}
		}
		serves += len(run.done)
		nextK = minK // re-present what was in flight
		before = crashBefore{byK: after.byK, authorised: after.authorised, sealedN: uint64(len(after.sealed))}
	}
	elapsed := time.Since(began)
	t.Logf("%d kill points, %d serves completed, in %v: in-flight serves not yet authorised %d, left unresolved %d, debited but not handed out %d; receipts sealed but not handed out %d",
		killPoints, serves, elapsed.Round(time.Millisecond), sawBefore, sawUnres, sawDebited, sawSealed)
	if sawBefore == 0 || sawUnres == 0 || sawDebited == 0 || sawSealed == 0 {
		t.Errorf("the kills did not reach every point of the serve (seed %d)", seed)
	}
}

// crashBefore is the journal as a child found it.
type crashBefore struct {
	byK        map[uint64]int
	authorised map[uint64]uint64
	sealedN    uint64
}

// runCrashChild starts a child serving from serve start on, kills it at a
// random point, and returns what it said.
func runCrashChild(t *testing.T, path string, start uint64, rnd *rand.Rand) crashRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashStartEnv+"="+strconv.FormatUint(start, 10),
		crashSeedEnv+"="+strconv.FormatUint(rnd.Uint64(), 10))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	run := crashRun{started: map[uint64]bool{}, done: map[uint64]uint64{}, envs: map[uint64][]byte{}, spent: map[uint64]bool{}}
	take := func(l string) {
		f := strings.Fields(l)
		if len(f) == 0 {
			return
		}
		num := func(i int) uint64 {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("child said %q", l)
			}
			return n
		}
		switch f[0] {
		case "ready":
			run.ready, run.head = true, strings.Join(f[1:], " ")
		case "start":
			run.started[num(1)] = true
		case "done":
			env, err := hex.DecodeString(f[3])
			if err != nil {
				t.Fatalf("child said %q", l)
			}
			run.done[num(1)] = num(2)
			run.envs[num(2)] = env
		case "spent":
			run.spent[num(1)] = true
		case "rec":
		default:
			run.errors = append(run.errors, l)
		}
	}
	deadline := time.After(20 * time.Second)
	wait := func(n int) { // n lines after ready, or the time it takes
		for seen := 0; seen < n; {
			select {
			case l, ok := <-lines:
				if !ok {
					return
				}
				take(l)
				if run.ready {
					seen++
				}
			case <-deadline:
				return
			}
		}
	}
	wait(1)
	if rnd.IntN(2) == 0 {
		wait(1 + rnd.IntN(30)) // just after the child said something: often mid-append-window
	} else {
		time.Sleep(time.Duration(rnd.IntN(15000)) * time.Microsecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for l := range lines {
		take(l)
	}
	cmd.Wait()
	return run
}
