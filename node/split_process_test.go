package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

// meshnodeProc is a meshnode daemon run by a test as its own process.
type meshnodeProc struct {
	name   string
	id     string // endpoint id
	state  string
	http   string // API address
	cmd    *exec.Cmd
	log    *lockedBuffer
	exited chan struct{}
}

// buildMeshnode builds cmd/meshnode into a temporary directory, without
// cgo, as make build does.
func buildMeshnode(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshnode")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/meshnode/meshnode/cmd/meshnode")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startMeshnode runs bin with a config file of config (TOML, to which the
// state dir, API and QUIC addresses and discovery are added), in a fresh
// home, and waits for its invite token. The process is stopped at the
// test's end.
func startMeshnode(t *testing.T, bin, name, config string) *meshnodeProc {
	t.Helper()
	home := t.TempDir()
	state := filepath.Join(home, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	key, _, err := identity.LoadOrCreateKey(state)
	if err != nil {
		t.Fatal(err)
	}
	p := &meshnodeProc{name: name, id: key.ID().String(), state: state, http: loopbackAddr(t), log: &lockedBuffer{}, exited: make(chan struct{})}
	cfg := fmt.Sprintf("state_dir = %q\nhttp_addr = %q\nquic_addr = \"127.0.0.1:0\"\ndiscovery = \"none\"\nlog_level = \"debug\"\n%s",
		state, p.http, config)
	cfgPath := filepath.Join(home, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH")}
	p.cmd = exec.Command(bin, "--config", cfgPath)
	p.cmd.Env, p.cmd.Dir, p.cmd.Stdout, p.cmd.Stderr = env, home, p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("--- %s log (end)\n%s", name, tailOf(p.log.String(), 6000))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(state, "invite.token")); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited:\n%s", name, p.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s wrote no invite token in 60s:\n%s", name, p.log.String())
		}
	}
}

func (p *meshnodeProc) invite(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.state, "invite.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// procSplitStatus reads the built-in model's split status from p's
// /api/status; nil when it shows none.
func procSplitStatus(t *testing.T, p *meshnodeProc) *SplitStatus {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/api/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st struct {
		Models []ModelStatus `json:"models"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil
	}
	for _, m := range st.Models {
		if m.Name == fortunesModel {
			return m.Split
		}
	}
	return nil
}

// waitSplitServing waits, up to a bound against hangs, for p to show the
// model split and serving, on a plan with no stage on the node without
// (if set).
func waitSplitServing(t *testing.T, p *meshnodeProc, what, without string) *SplitStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last *SplitStatus
	for time.Now().Before(deadline) {
		if last = procSplitStatus(t, p); last != nil && last.State == "serving" &&
			!slices.ContainsFunc(last.Stages, func(s StageStatus) bool { return s.Node == without }) {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not serving after 60s; last status %+v", what, last)
	return nil
}

// procAnswer is how one request against a process ended.
type procAnswer struct {
	stream bool
	code   int
	retry  string
	text   string
	// For a stream: whether it ended with [DONE], and the error event
	// that ended it, if one did.
	done     bool
	errEvent *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}
	err error // transport
}

// procCompletion sends a greedy completion to p. A streamed one calls
// first, if set, once its first piece of text has arrived.
func procCompletion(ctx context.Context, p *meshnodeProc, prompt string, maxTokens int, stream bool, first func()) procAnswer {
	body, _ := json.Marshal(map[string]any{"model": fortunesModel, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "stream": stream})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+p.http+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	a := procAnswer{stream: stream}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.code, a.retry = resp.StatusCode, resp.Header.Get("Retry-After")
	if !stream || resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			a.err = err
			return a
		}
		var answer struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		json.Unmarshal(b, &answer)
		if len(answer.Choices) == 1 {
			a.text = answer.Choices[0].Text
		}
		if resp.StatusCode != http.StatusOK {
			a.text = string(b)
		}
		return a
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			a.done = true
			continue
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			a.err = fmt.Errorf("event %q: %w", data, err)
			return a
		}
		if ev.Error != nil {
			a.errEvent = ev.Error
			continue
		}
		for _, c := range ev.Choices {
			if c.Text != "" && text.Len() == 0 && first != nil {
				first()
				first = nil
			}
			text.WriteString(c.Text)
		}
	}
	a.err = sc.Err()
	a.text = text.String()
	return a
}

// TestSplitKillStageProcess is TestSplitServeAndRecover with real
// processes: three meshnode daemons, built from this checkout, on
// loopback QUIC, each with a memory budget the built-in model does not
// fit but any two of them do. The head splits the model over itself and
// one peer; under load (four clients in a loop, streamed and not), the
// peer that runs the other stage is killed with SIGKILL in the middle of
// a generation. Every request in flight ends within seconds (the head
// probes a stage that does not answer, rather than waiting out the QUIC
// idle timeout) with 503 and Retry-After (or, for a stream that had started, an
// error event with code model_unavailable and no [DONE]) unless it had
// already finished; the head places the model again on the remaining
// peer, never the killed one; and the answers then are the ones before,
// token for token.
func TestSplitKillStageProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meshnode and runs three daemons (about 15 s)")
	}
	const prompt, maxTokens = "A man walks into a bar", 48
	bin := buildMeshnode(t)
	headroom := int64(64 << 10)
	budget := splitBudget(t, headroom)
	top := fmt.Sprintf("memory_budget = %d\n", budget)
	stages := fmt.Sprintf("[stages]\nheadroom = %d\n", headroom)
	peer := func(name string) *meshnodeProc {
		models := filepath.Join(t.TempDir(), "models")
		if err := os.MkdirAll(models, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fortunesPath(t), filepath.Join(models, BuiltinModelFile)); err != nil {
			t.Fatal(err)
		}
		return startMeshnode(t, bin, name, fmt.Sprintf("%smodels_dir = %q\nmodels = [%q]\n%s", top, models, ReferenceModel, stages))
	}
	b, c := peer("b"), peer("c")
	a := startMeshnode(t, bin, "a (head)", fmt.Sprintf("%sjoin = [%q, %q]\n%s[api]\nconcurrency = 4\n[[model]]\npath = %q\ncontext = %d\n",
		top, b.invite(t), c.invite(t), stages, fortunesPath(t), splitContext))
	plan := waitSplitServing(t, a, "the split model", "")
	t.Logf("plan %+v", plan)
	if len(plan.Stages) != 2 || plan.Stages[0].Node != a.id || !strings.HasPrefix(plan.Stages[0].Layers, "0-") {
		t.Fatalf("plan %+v: want two stages, the first on the head %s", plan, a.id)
	}
	victim, survivor := b, c
	if plan.Stages[1].Node == c.id {
		victim, survivor = c, b
	} else if plan.Stages[1].Node != b.id {
		t.Fatalf("plan %+v: the second stage is on neither peer", plan)
	}

	ctx := context.Background()
	want := procCompletion(ctx, a, prompt, maxTokens, false, nil)
	if want.err != nil || want.code != http.StatusOK || want.text == "" {
		t.Fatalf("before the kill: %d %v %q", want.code, want.err, want.text)
	}
	if got := procCompletion(ctx, a, prompt, maxTokens, true, nil); got.err != nil || got.code != http.StatusOK || !got.done || got.errEvent != nil || got.text != want.text {
		t.Fatalf("streamed before the kill: %+v, want %q", got, want.text)
	}

	// Load: four clients in a loop, two streamed, two not, until the
	// kill; each then finishes the request it has in flight.
	var (
		mu     sync.Mutex
		after  []procAnswer // requests in flight at the kill, or sent after it
		killed = make(chan struct{})
		// A streamed request has its first text: sent only while the
		// test waits for it, so that one received is fresh.
		started = make(chan struct{})
		wg      sync.WaitGroup
	)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := i%2 == 0
			for {
				var first func()
				if stream {
					first = func() {
						select {
						case started <- struct{}{}:
						default:
						}
					}
				}
				// The bound is against a hang only.
				rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
				got := procCompletion(rctx, a, prompt, maxTokens, stream, first)
				cancel()
				select {
				case <-killed:
					mu.Lock()
					after = append(after, got)
					mu.Unlock()
					return
				default:
				}
				if got.err != nil || got.code != http.StatusOK || got.text != want.text || stream && (!got.done || got.errEvent != nil) {
					t.Errorf("before the kill: %+v, want %q", got, want.text)
					return
				}
			}
		}()
	}
	// Kill the stage's process while a stream is in the middle of its
	// generation.
	for range 3 { // a few rounds of load first
		<-started
	}
	<-started
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	close(killed)
	t.Logf("killed %s (%s)", victim.name, victim.id)
	<-victim.exited
	killedAt := time.Now()
	wg.Wait()
	took := time.Since(killedAt)
	t.Logf("the requests in flight ended %v after the kill", took.Round(time.Millisecond))
	// About 5 s (a probe after 2 s without an answer, within 3 s): a
	// generous bound, below the 20 s a connection takes to time out.
	if took > 15*time.Second {
		t.Errorf("the requests in flight took %v to end after the kill: the dead stage was not found out by a probe", took)
	}
	// Each ended: whole (it had finished before the stage went), with 503
	// and Retry-After (a non-streamed one, or a stream that had sent
	// nothing yet), or, for a stream under way, with the API's mid-stream
	// error: a data event {"error": {...}} with code model_unavailable,
	// and no [DONE].
	var whole, refused, cutStreams int
	for _, got := range after {
		retry, _ := strconv.Atoi(got.retry)
		switch {
		case got.err != nil:
			t.Errorf("a request in flight at the kill: %v (%+v)", got.err, got)
		case got.code == http.StatusOK && got.errEvent == nil && (!got.stream || got.done) && got.text == want.text:
			whole++
		case got.code == http.StatusServiceUnavailable && retry > 0 && strings.Contains(got.text, `"code":"model_unavailable"`):
			refused++
		case got.code == http.StatusOK && got.stream && !got.done && got.errEvent != nil &&
			got.errEvent.Code == "model_unavailable" && got.errEvent.Type == "server_error" && strings.HasPrefix(want.text, got.text):
			cutStreams++
		default:
			t.Errorf("a request in flight at the kill ended %+v (error event %+v); want 503 with Retry-After, an error event, or the whole answer", got, got.errEvent)
		}
	}
	t.Logf("after the kill: %d whole, %d refused with 503, %d streams cut with an error event", whole, refused, cutStreams)
	if cutStreams == 0 {
		t.Errorf("no stream was cut in the middle by the kill: %+v", after)
	}

	plan = waitSplitServing(t, a, "the model placed again", victim.id)
	t.Logf("new plan %+v", plan)
	if len(plan.Stages) != 2 || plan.Stages[0].Node != a.id || plan.Stages[1].Node != survivor.id {
		t.Fatalf("new plan %+v: want its second stage on %s", plan, survivor.name)
	}
	for _, s := range plan.Stages {
		if s.Node == victim.id {
			t.Fatalf("the new plan %+v places a stage on the killed node", plan)
		}
	}
	if got := procCompletion(ctx, a, prompt, maxTokens, false, nil); got.err != nil || got.code != http.StatusOK || got.text != want.text {
		t.Fatalf("after recovery: %+v, want %q", got, want.text)
	}
	if got := procCompletion(ctx, a, prompt, maxTokens, true, nil); got.err != nil || got.code != http.StatusOK || !got.done || got.text != want.text {
		t.Fatalf("streamed after recovery: %+v, want %q", got, want.text)
	}
}
