package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// chromium is the browser the console's test drives: Debian's chromium
// (.ci/run installs it), or another Chrome on PATH.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// steppedModel serves its model's engine one token at a time: each token
// waits for a step, or for the gate to open for good.
type steppedModel struct {
	localModel
	g *stepGate
}

type stepGate struct{ step, open chan struct{} }

func (m steppedModel) Engine() engine.Engine { return steppedEngine{m.localModel.Engine(), m.g} }

type steppedEngine struct {
	engine.Engine
	g *stepGate
}

func (e steppedEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	return e.Engine.Serve(ctx, req, prompt, func(tok uint32) error {
		select {
		case <-e.g.step:
		case <-e.g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
		return emit(tok)
	})
}

// pageProblems are the errors a page reported: exceptions, console errors
// and warnings, and the browser's own log errors (a policy violation, a
// failed load).
type pageProblems struct {
	mu   sync.Mutex
	list []string
}

func (p *pageProblems) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *cdpruntime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "exception: " + d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
	case *cdpruntime.EventConsoleAPICalled:
		if ev.Type != cdpruntime.ConsoleAPICalledTypeError && ev.Type != cdpruntime.ConsoleAPICalledTypeWarning {
			return
		}
		msg = "console." + string(ev.Type) + ":"
		for _, a := range ev.Args {
			msg += " " + a.Description + string(a.Value)
		}
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level != cdplog.EntryLevelError && ev.Entry.Level != cdplog.EntryLevelWarning {
			return
		}
		msg = "log " + string(ev.Entry.Source) + ": " + ev.Entry.Text + " " + ev.Entry.URL
	default:
		return
	}
	p.mu.Lock()
	p.list = append(p.list, msg)
	p.mu.Unlock()
}

func (p *pageProblems) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.list)
}

// browser starts a headless chromium for the test, or skips it when there
// is none.
func browser(t *testing.T) (context.Context, *pageProblems) {
	t.Helper()
	bin := chromium()
	if bin == "" {
		t.Skip("no chromium on PATH (apt-get install chromium): the console's browser test needs one")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", bin, err)
	}
	problems := &pageProblems{}
	if err := chromedp.Listen(ctx, problems.listen); err != nil {
		t.Fatal(err)
	}
	// Each step gets a bound of its own (a timeout on the first call
	// would stop the browser).
	return ctx, problems
}

// do runs steps within a minute, failing the test with what on an error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value, as do does.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// screenshot saves the element sel as a PNG in MESHNODE_SCREENSHOTS, when
// set (docs/img has the ones docs/console.md shows).
func screenshot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	dir := os.Getenv("MESHNODE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot of "+sel, chromedp.Screenshot(chromedp.CSS(sel)))
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleInBrowser opens the web console of a node in a two-node mesh
// in a real headless chromium: the page loads under its strict policy,
// shows the other node in its mesh table, streams a chat answer from the
// built-in model piece by piece (the test lets the tokens out one at a
// time and sees the text grow), and then shows the request in the live
// log and its receipt, verified.
func TestConsoleInBrowser(t *testing.T) {
	ctx, problems := browser(t)
	defer func() {
		if t.Failed() {
			t.Logf("the page reported: %q", problems.all())
			if text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`)); err == nil {
				t.Logf("the page shows:\n%s", text)
			}
		}
	}()
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	b, _ := startNode(t, Config{})
	g := &stepGate{step: make(chan struct{}), open: make(chan struct{})}
	opened := false
	defer func() {
		if !opened {
			close(g.open)
		}
	}()
	a, _ := startNodeWith(t, Config{Join: []string{b.invite}}, func(n *Node) {
		n.wrapModel = func(m localModel) localModel { return steppedModel{m, g} }
	})
	model := BuiltinModelName
	bID := b.key.ID().String()
	waitFor(t, "A to admit B", func() bool {
		for _, p := range a.Status().Peers {
			if p.ID == bID && p.Role != "" {
				return true
			}
		}
		return false
	})

	url := consoleURL(a.HTTPAddr())
	peerSel := chromedp.CSS(`#nodes tbody tr[data-node="` + bID + `"]`)
	do(t, ctx, "loading "+url,
		chromedp.Navigate(url),
		chromedp.WaitVisible(peerSel),
		chromedp.WaitReady(chromedp.CSS(`#chat-model option[value="`+model+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.live`)),
	)
	if row := get(t, ctx, "B's row", chromedp.Text(peerSel)); !strings.Contains(row, bID[:12]) || !strings.Contains(row, model) || !strings.Contains(row, "host") {
		t.Fatalf("B's row in the mesh table: %q", row)
	}

	do(t, ctx, "sending a chat",
		chromedp.SetValue(chromedp.CSS(`#chat-max`), "24"),
		chromedp.SendKeys(chromedp.CSS(`#chat-input`), "Tell me a fortune."),
		chromedp.Click(chromedp.CSS(`#chat-send`)),
		chromedp.WaitReady(chromedp.CSS(`#chat-answer`)),
	)
	// Let the tokens out one by one, reading the answer as it grows: at
	// least two distinct texts must show while the stream is still open.
	var partials []string
	seen := ""
	for tokens := 0; len(partials) < 2; tokens++ {
		if tokens == 20 {
			t.Fatalf("20 tokens let out, and the page showed %d texts: %q", len(partials), partials)
		}
		select {
		case g.step <- struct{}{}:
		case <-time.After(time.Minute):
			t.Fatalf("the generation took no token %d", tokens+1)
		}
		// A token may show nothing yet (a piece of a character, a stop
		// string's start); then the next one is let out.
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			v := get(t, ctx, "reading the answer", chromedp.Evaluate[[]string](`(a => [a.textContent, a.dataset.state || ''])(document.querySelector('#chat-answer'))`))
			text, state := v[0], v[1]
			if state != "" && state != "streaming" {
				t.Fatalf("the answer is %s while its generation is held: %q", state, text)
			}
			if text == seen {
				continue
			}
			if !strings.HasPrefix(text, seen) {
				t.Fatalf("the answer %q does not continue %q", text, seen)
			}
			seen = text
			if strings.TrimSpace(text) != "" {
				partials = append(partials, text)
			}
			break
		}
	}
	close(g.open)
	opened = true
	do(t, ctx, "the end of the answer", chromedp.WaitVisible(chromedp.CSS(`#chat-answer[data-state="done"]`)))
	final := get(t, ctx, "the answer", chromedp.Text(chromedp.CSS(`#chat-answer`)))
	status := get(t, ctx, "the status line", chromedp.Text(chromedp.CSS(`#chat-status`)))
	if !strings.HasPrefix(final, partials[len(partials)-1]) || len(final) <= len(partials[0]) {
		t.Fatalf("final answer %q after partials %q", final, partials)
	}
	if !strings.Contains(status, "tokens") || !strings.Contains(status, "receipt #") {
		t.Fatalf("the playground's status line: %q", status)
	}
	t.Logf("streamed %q after the partial texts %q (%s)", final, partials, status)

	// The request in the live log, with its receipt, which the receipts
	// panel shows verified; the model's throughput and energy.
	logSel := chromedp.CSS(`#log tbody tr[data-receipt]:not([data-receipt=""])`)
	do(t, ctx, "the request in the live log", chromedp.WaitVisible(logSel))
	receiptID := get(t, ctx, "its receipt", chromedp.AttributeValue(logSel, "data-receipt")).Value
	if row := get(t, ctx, "the live log's row", chromedp.Text(logSel)); !strings.Contains(row, "/v1/chat/completions") ||
		!strings.Contains(row, model) || !strings.Contains(row, "local") || !strings.Contains(row, "200") {
		t.Fatalf("the live log's row: %q", row)
	}
	recSel := chromedp.CSS(`#receipts tbody tr[data-receipt="` + receiptID + `"]`)
	do(t, ctx, "the receipt, verified", chromedp.WaitVisible(recSel+`[data-verified="true"]`))
	if row := get(t, ctx, "the receipt's row", chromedp.Text(recSel)); !strings.Contains(row, "✓ ok") || !strings.Contains(row, model) {
		t.Fatalf("the receipt's row: %q", row)
	}
	modelSel := `#models tbody tr[data-model="` + model + `"] `
	tps := get(t, ctx, "tokens/s", chromedp.Text(chromedp.CSS(modelSel+"td.tps")))
	ujt := get(t, ctx, "µJ/token", chromedp.Text(chromedp.CSS(modelSel+"td.ujt")))
	if tps == "" || ujt == "" {
		t.Fatalf("the model's row shows %q tokens/s and %q µJ/token", tps, ujt)
	}

	if p := problems.all(); len(p) > 0 {
		t.Fatalf("the page reported errors: %q", p)
	}

	screenshot(t, ctx, "#mesh-card", "console-mesh.png")
	screenshot(t, ctx, "#chat-card", "console-chat.png")
	screenshot(t, ctx, "main", "console.png")
}

// TestConsoleAPIKeyInBrowser: on a node with an API key the console's
// page loads without it, asks for it, says when the node refuses the one
// given, and with the right one shows the node and its live log.
func TestConsoleAPIKeyInBrowser(t *testing.T) {
	ctx, problems := browser(t)
	n, _ := startNode(t, Config{Models: []string{ReferenceModel}, APIKey: "console-secret"})
	self := chromedp.CSS(`#nodes tbody tr[data-node="` + n.key.ID().String() + `"]`)
	do(t, ctx, "a wrong key",
		chromedp.Navigate(consoleURL(n.HTTPAddr())),
		chromedp.WaitVisible(chromedp.CSS(`#auth`)),
		chromedp.SendKeys(chromedp.CSS(`#auth-key`), "wrong"),
		chromedp.Click(chromedp.CSS(`#auth-save`)),
		chromedp.WaitVisible(chromedp.CSS(`#auth`)),
	)
	waitFor(t, "the page to say the key was refused", func() bool {
		return strings.Contains(get(t, ctx, "the key's error", chromedp.Text(chromedp.CSS(`#auth-error`))), "refused")
	})
	do(t, ctx, "the right key",
		chromedp.SendKeys(chromedp.CSS(`#auth-key`), "console-secret"),
		chromedp.Click(chromedp.CSS(`#auth-save`)),
		chromedp.WaitNotVisible(chromedp.CSS(`#auth`)),
		chromedp.WaitVisible(self),
		chromedp.WaitVisible(chromedp.CSS(`#live.live`)),
		chromedp.WaitReady(chromedp.CSS(`#chat-model option[value="`+ReferenceModel+`"]`)),
	)
	// The refusals of the wrong key are the only errors the page saw.
	for _, p := range problems.all() {
		if !strings.Contains(p, "401") {
			t.Errorf("the page reported: %s", p)
		}
	}
}

// TestConsoleSSEReader: the console's reader of Server-Sent Events (which
// both the playground and the live log use) takes events split anywhere
// across network reads, CRLF line ends, comments and multi-line data.
func TestConsoleSSEReader(t *testing.T) {
	ctx, _ := browser(t)
	n, _ := startNode(t, Config{Models: []string{ReferenceModel}})
	do(t, ctx, "loading the console", chromedp.Navigate(consoleURL(n.HTTPAddr())), chromedp.WaitReady(chromedp.CSS(`#chat-send`)))
	got := get(t, ctx, "reading a stream", chromedp.Evaluate[[]string](`(async () => {
		const { readSSE } = await import('./js/api.js');
		const chunks = ['event: snap', 'shot\r\nda', 'ta: {"a":', '1}\r\n', '\r', '\n: keepalive\n\ndata: x\ndata:y\n', '\n', 'data: [DONE]\n\n', 'data: cut'];
		const enc = new TextEncoder();
		const body = new ReadableStream({ start(c) { for (const s of chunks) c.enqueue(enc.encode(s)); c.close(); } });
		const got = [];
		await readSSE(new Response(body), (name, data) => got.push(name + '=' + data));
		return got;
	})()`, chromedp.EvalAwaitPromise))
	want := []string{`snapshot={"a":1}`, "message=x\ny", "message=[DONE]"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}
