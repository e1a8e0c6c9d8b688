package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

func receiptCommand() *cli.Command {
	return &cli.Command{
		Name:  "receipt",
		Usage: "check mesh/1 receipts",
		Subcommands: []*cli.Command{{
			Name:      "verify",
			Usage:     "verify a receipt envelope and, given its steward's log, its place in the hash chain",
			ArgsUsage: "FILE",
			Description: "FILE holds one receipt: a response's usage.energy object (or the whole response), a saved\n" +
				"stream (the receipt is in its final usage chunk, which stream_options.include_usage asks\n" +
				"for), the envelope in hex, or the raw COSE_Sign1 bytes. --log names the steward's receipt log,\n" +
				"as `meshcli receipt log` writes it: one envelope a line, in hex or as a JSON object with\n" +
				"envelope_hex, verified link by link from its first receipt (genesis, unless the node has\n" +
				"dropped older ones). An answer of several choices (n, a batch of prompts) has a receipt per\n" +
				"choice: --choice names the one.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "log", Usage: "the steward's receipt log `FILE`"},
				&cli.StringFlag{Name: "steward", Usage: "require this steward (did:key)"},
				choiceFlag,
			},
			Action: verifyReceipt,
		}, {
			Name:  "replay",
			Usage: "have the node that served a generation re-run it against its receipt, and check the disclosure",
			Description: "--request names the request body as it was sent (chat/completions, completions,\n" +
				"responses, Anthropic messages, Ollama or llama.cpp /completion JSON); --usage the\n" +
				"usage.energy object that came back (or the usage object, or the whole response, or the\n" +
				"saved stream). --path names the path it was sent to where the body does not say (a\n" +
				"/v1/messages request that ends with an assistant message, Ollama's /api/generate, a\n" +
				"/completion without n_predict); a saved answer of those says it itself.\n" +
				"The node re-tokenizes the prompt as the serve did, re-runs it on the backend the receipt\n" +
				"names and answers verified, diverged or not replayable; a verified replay discloses the\n" +
				"receipt (opening, payload digest, output), which is checked here against the receipt's\n" +
				"output commitment. Exit status 0 only when verified.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "request", Usage: "the request body `FILE`", Required: true},
				&cli.StringFlag{Name: "usage", Usage: "the usage.energy `FILE`", Required: true},
				&cli.StringFlag{Name: "node", Usage: "the API `URL` of the node that served it (default: --api)"},
				&cli.StringFlag{Name: "path", Usage: "the API `PATH` the request was sent to (default: what its fields, or a saved /v1/messages or Ollama answer, say)"},
				choiceFlag,
				jsonFlag,
			},
			Action: replayReceipt,
		}, {
			Name:  "log",
			Usage: "export the node's receipt log, for receipt verify --log",
			Description: "Fetches every receipt the node's steward sealed (GET /v1/mesh/receipts on --api), in chain\n" +
				"order, and writes one a line ({\"sequence\": N, \"envelope_hex\": \"…\"}) to -o FILE or stdout.\n" +
				"The node keeps them in journal/receipts.jsonl in its state dir, up to steward.receipt_log_bytes\n" +
				"(64 MiB): past that it drops its older half, and the log then begins after genesis.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the log to `FILE` instead of stdout"},
				&cli.Uint64Flag{Name: "from", Usage: "start at this receipt `SEQUENCE` (default: the first the node holds)"},
			},
			Action: exportReceiptLog,
		}},
	}
}

// receiptPage is GET /v1/mesh/receipts's answer (api.ReceiptPage).
type receiptPage struct {
	Steward  string            `json:"steward"`
	First    uint64            `json:"first_sequence"`
	Next     uint64            `json:"next_sequence"`
	Receipts []json.RawMessage `json:"receipts"`
}

func exportReceiptLog(c *cli.Context) error {
	if c.NArg() != 0 {
		return errors.New("receipt log takes no arguments: name the file with -o")
	}
	var lines []json.RawMessage
	var page receiptPage
	from, start := c.Uint64("from"), uint64(0)
	for first := true; ; first = false {
		page = receiptPage{}
		if err := getJSON(c, fmt.Sprintf("/v1/mesh/receipts?from=%d", from), &page); err != nil {
			return err
		}
		if first {
			start = max(from, page.First)
		} else if page.First > from {
			return fmt.Errorf("the node dropped receipts %d…%d while they were being exported: run it again", from, page.First-1)
		}
		lines = append(lines, page.Receipts...)
		from = max(from, page.First) + uint64(len(page.Receipts))
		if len(page.Receipts) == 0 || from >= page.Next {
			break
		}
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	e := envOf(c)
	out, dest := io.Writer(e.stdout), "stdout"
	if path := c.String("output"); path != "" {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return err
		}
		dest = path
	} else if _, err := out.Write(b.Bytes()); err != nil {
		return err
	}
	switch {
	case len(lines) == 0:
		fmt.Fprintf(e.stderr, "no receipts from sequence %d: the steward's next is %d\n", start, page.Next)
	default:
		fmt.Fprintf(e.stderr, "%s (sequences %d…%d) of steward %s to %s\n", plural(len(lines), "receipt"), start, start+uint64(len(lines))-1, page.Steward, dest)
	}
	if start > 0 && c.Uint64("from") < start {
		fmt.Fprintf(e.stderr, "the node's log begins at receipt %d: it dropped the older ones past steward.receipt_log_bytes, or they predate the log\n", start)
	}
	return nil
}

// replayAnswer is POST /v1/mesh/replay's answer (docs/receipts.md).
type replayAnswer struct {
	Verdict           string              `json:"verdict"`
	CutShort          string              `json:"cut_short"`
	PrefixTokens      int                 `json:"prefix_tokens"`
	FirstDivergence   *int                `json:"first_divergence"`
	Reason            string              `json:"reason"`
	Receipt           string              `json:"receipt"`
	RequestID         string              `json:"request_id"`
	ReplayedRequestID string              `json:"replayed_request_id"`
	Disclosure        *receipt.Disclosure `json:"disclosure"`
}

func replayReceipt(c *cli.Context) error {
	if c.NArg() != 0 {
		return errors.New("receipt replay takes no arguments: name the files with --request and --usage")
	}
	request, err := readBounded(c.String("request"))
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(request); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return fmt.Errorf("%s: not a JSON object; --request is the request body as it was sent", c.String("request"))
	}
	raw, err := readBounded(c.String("usage"))
	if err != nil {
		return err
	}
	path := c.String("path")
	if path == "" {
		path = answerPath(raw)
	}
	if raw, err = choiceEnergy(c, raw); err != nil {
		return fmt.Errorf("%s: %w", c.String("usage"), err)
	}
	if raw, err = fromStream(raw); err != nil {
		return fmt.Errorf("%s: %w", c.String("usage"), err)
	}
	energy, err := energyObject(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", c.String("usage"), err)
	}
	env, err := envelopeOf(energy)
	if err != nil {
		return fmt.Errorf("%s: %w", c.String("usage"), err)
	}
	// The receipt is checked here first: the node's word is only taken
	// about what it can show.
	sealed, err := receipt.Open(env, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", c.String("usage"), err)
	}
	fields := map[string]any{"request": json.RawMessage(bytes.TrimSpace(request)), "energy": energy}
	if path != "" {
		fields["endpoint"] = path
	}
	if c.IsSet("choice") {
		fields["choice"] = c.Int("choice")
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	flag, base := "--node", c.String("node")
	if base == "" {
		flag, base = "--api", c.String("api")
	}
	var ans replayAnswer
	var answer json.RawMessage
	if err := callJSON(c, flag, base, http.MethodPost, "/v1/mesh/replay", body, &answer); err != nil {
		return err
	}
	if err := json.Unmarshal(answer, &ans); err != nil {
		return fmt.Errorf("POST /v1/mesh/replay: the node's answer does not decode: %w", err)
	}
	r := &sealed.Receipt
	if ans.Receipt != sealed.ID.String() {
		return fmt.Errorf("the node answered about receipt %s, not %s", ans.Receipt, sealed.ID)
	}
	opens := ans.Disclosure != nil && ans.Disclosure.Opens(r)
	w := envOf(c).stdout
	if c.Bool("json") {
		if err := printJSON(w, answer); err != nil {
			return err
		}
	} else {
		t := newTable(w, "Replay", verdictLine(ans))
		t.row("Receipt", sealed.ID.String())
		t.row("Steward", r.Steward)
		t.row("Sequence", fmt.Sprintf("%d", r.Sequence))
		t.row("Served", r.Recipe+" on "+r.Backend)
		t.row("Request", r.RequestID.String())
		if ans.ReplayedRequestID != "" && ans.ReplayedRequestID != r.RequestID.String() {
			t.row("Replayed", ans.ReplayedRequestID+" (the request shown derives another id)")
		}
		if d := ans.Disclosure; d != nil {
			t.row("Opening", d.Opening.String())
			t.row("Payload", d.Payload.String())
			t.row("Output", plural(len(d.Output), "token")+": "+tokenList(d.Output, 16))
			if opens {
				t.row("Disclosure", "opens the receipt's output commitment (checked here)")
			} else {
				t.row("Disclosure", "does NOT open the receipt's output commitment")
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	switch {
	case ans.Disclosure != nil && !opens:
		return errors.New("the node's disclosure does not open the receipt's output commitment")
	case ans.Verdict == "verified" && !opens:
		return errors.New("the node says verified but disclosed nothing that opens the receipt")
	case ans.Verdict != "verified":
		return errors.New("the replay did not verify")
	}
	return nil
}

func verdictLine(a replayAnswer) string {
	switch a.Verdict {
	case "diverged":
		if a.FirstDivergence != nil {
			return fmt.Sprintf("diverged at token %d", *a.FirstDivergence)
		}
		return "diverged"
	case "not_replayable":
		return "not replayable: " + a.Reason
	case "verified":
		if a.PrefixTokens > 0 {
			return fmt.Sprintf("verified (cut short: %s; its %s are the re-run's first)", cutWhy(a.CutShort), plural(a.PrefixTokens, "token"))
		}
	}
	return a.Verdict
}

// cutWhy says in words why a receipt's serve was cut short.
func cutWhy(c string) string {
	switch c {
	case receipt.CutClient:
		return "the client stopped reading"
	case receipt.CutCeiling:
		return "stopped at the request's joule ceiling"
	case receipt.CutEngine:
		return "the engine failed"
	case receipt.CutLimit:
		return "stopped at the client's time limit"
	}
	return c
}

// tokenList writes ids space-separated, at most n of them.
func tokenList(ids []uint32, n int) string {
	var b strings.Builder
	for i, id := range ids {
		if i == n {
			fmt.Fprintf(&b, " …")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d", id)
	}
	return b.String()
}

// energyObject finds the usage.energy object in a file holding it, the
// usage object, or the whole response.
func energyObject(b []byte) (json.RawMessage, error) {
	var doc struct {
		EnvelopeHex json.RawMessage `json:"envelope_hex"`
		Energy      json.RawMessage `json:"energy"`
		Usage       struct {
			Energy json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	text := bytes.TrimSpace(b)
	if err := json.Unmarshal(text, &doc); err != nil {
		return nil, fmt.Errorf("not a usage.energy object in JSON: %w", err)
	}
	for _, e := range []json.RawMessage{doc.Usage.Energy, doc.Energy} {
		if len(e) > 0 && e[0] == '{' {
			return e, nil
		}
	}
	if len(doc.EnvelopeHex) > 0 {
		return text, nil
	}
	if err := severalChoices(text); err != nil {
		return nil, err
	}
	return nil, errors.New("the JSON has no usage.energy object (nor energy, nor envelope_hex)")
}

// severalChoices is the error for an answer with no usage.energy that
// is one of several choices, each with its receipt; nil for any other.
func severalChoices(text []byte) error {
	if bytes.Contains(text, []byte(`"choices"`)) && bytes.Contains(text, []byte(`"energy"`)) {
		return errors.New("the JSON has no usage.energy object: an answer of several choices has a receipt per choice (choices[].energy); name one with --choice")
	}
	return nil
}

// ndjsonLast is the last line of text when text is an NDJSON stream (a
// JSON object, then more: Ollama's), where its receipt and its shape are.
func ndjsonLast(text []byte) ([]byte, bool) {
	if len(text) == 0 || text[0] != '{' || json.Valid(text) {
		return nil, false
	}
	lines := bytes.Split(text, []byte("\n"))
	return bytes.TrimSpace(lines[len(lines)-1]), true
}

// choiceFlag names the choice of an answer of several.
var choiceFlag = &cli.IntFlag{Name: "choice", Usage: "the `INDEX` of the choice whose receipt it is, in an answer of several choices (n, a batch of prompts)", DefaultText: "the answer's one receipt"}

// choiceEnergy is, with --choice N, the receipt of choice N of the saved
// answer b (whole or streamed: its choices[].energy, each choice a serve
// of its own), as an energy object; without it, b.
func choiceEnergy(c *cli.Context, b []byte) ([]byte, error) {
	if !c.IsSet("choice") {
		return b, nil
	}
	return choiceEnergyOf(b, c.Int("choice"))
}

// choiceEnergyOf is choice n's receipt in the saved answer b.
func choiceEnergyOf(b []byte, n int) ([]byte, error) {
	type answer struct {
		Choices []struct {
			Index  int             `json:"index"`
			Energy json.RawMessage `json:"energy"`
		} `json:"choices"`
	}
	var found json.RawMessage
	pick := func(doc []byte) {
		var a answer
		if json.Unmarshal(doc, &a) != nil {
			return
		}
		for _, ch := range a.Choices {
			if ch.Index == n && len(ch.Energy) > 0 && ch.Energy[0] == '{' {
				found = ch.Energy
			}
		}
	}
	text := bytes.TrimSpace(b)
	if len(text) > 0 && text[0] == '{' {
		pick(text)
	} else {
		for line := range bytes.Lines(text) {
			if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
				pick(bytes.TrimSpace(data))
			}
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no receipt for choice %d: the answer's choices[].energy holds none with index %d", n, n)
	}
	return found, nil
}

// answerPath is the API path a saved answer says its request was sent to,
// where the request alone may not: Anthropic's Messages API (an object
// of type "message", or a stream with a message_delta event), Ollama's
// chat and generate (an object, or the last line of a stream, that is
// done and holds a message or a response), llama-server's /completion
// (generation_settings) and OpenAI's completions (object
// "text_completion": its request may hold n_predict, which alone says
// /completion). "" for any other.
func answerPath(b []byte) string {
	text := bytes.TrimSpace(b)
	if last, ok := ndjsonLast(text); ok {
		text = last
	}
	var doc struct {
		Type     string          `json:"type"`
		Done     bool            `json:"done"`
		Message  json.RawMessage `json:"message"`
		Response json.RawMessage `json:"response"`
		Settings json.RawMessage `json:"generation_settings"`
		Object   string          `json:"object"`
	}
	if json.Unmarshal(text, &doc) == nil {
		switch {
		case doc.Settings != nil:
			return "/completion"
		case doc.Object == "text_completion":
			return "/v1/completions"
		case doc.Type == "message":
			return "/v1/messages"
		case doc.Done && doc.Message != nil:
			return "/api/chat"
		case doc.Done && doc.Response != nil:
			return "/api/generate"
		}
		return ""
	}
	for line := range bytes.Lines(b) {
		line = bytes.TrimSpace(line)
		switch {
		case bytes.Equal(line, []byte("event: message_delta")):
			return "/v1/messages"
		case bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, []byte(`"generation_settings"`)):
			return "/completion" // llama.cpp's stream: its last event
		case bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, []byte(`"object":"text_completion"`)):
			return "/v1/completions"
		}
	}
	return ""
}

// fromStream takes the usage.energy object out of a saved
// text/event-stream answer (a stream's receipt is in its final usage
// chunk: chat and completions' last data chunk before [DONE], or the
// Responses API's response.completed or response.incomplete event); any
// other input is returned as it is.
func fromStream(b []byte) ([]byte, error) {
	text := bytes.TrimSpace(b)
	if last, ok := ndjsonLast(text); ok {
		return last, nil // Ollama's: the receipt is in the done object's energy
	}
	if !bytes.HasPrefix(text, []byte("data:")) && !bytes.HasPrefix(text, []byte("event:")) && !bytes.HasPrefix(text, []byte(":")) {
		return b, nil
	}
	var energy json.RawMessage
	chunks := 0
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, maxReceiptFile)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 || data[0] != '{' {
			continue // [DONE]
		}
		chunks++
		var chunk struct {
			Energy json.RawMessage `json:"energy"` // llama.cpp's /completion: its last event
			Usage  struct {
				Energy json.RawMessage `json:"energy"`
			} `json:"usage"`
			Response struct {
				Usage struct {
					Energy json.RawMessage `json:"energy"`
				} `json:"usage"`
			} `json:"response"`
		}
		if json.Unmarshal(data, &chunk) != nil {
			continue
		}
		for _, e := range []json.RawMessage{chunk.Usage.Energy, chunk.Response.Usage.Energy, chunk.Energy} {
			if len(e) > 0 && e[0] == '{' {
				energy = e
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the stream: %w", err)
	}
	if energy == nil {
		return nil, fmt.Errorf("a saved stream of %s with no receipt: a stream carries its receipt in a final usage chunk "+
			"only when the request asks for it with \"stream_options\": {\"include_usage\": true} (the Responses API always sends it)",
			plural(chunks, "chunk"))
	}
	return energy, nil
}

// maxReceiptFile bounds what is read of a receipt or log file.
const maxReceiptFile = 64 << 20

func verifyReceipt(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("receipt verify takes one FILE (see meshcli receipt verify --help)")
	}
	raw, err := readBounded(c.Args().First())
	if err != nil {
		return err
	}
	if raw, err = choiceEnergy(c, raw); err != nil {
		return fmt.Errorf("%s: %w", c.Args().First(), err)
	}
	if raw, err = fromStream(raw); err != nil {
		return fmt.Errorf("%s: %w", c.Args().First(), err)
	}
	env, err := envelopeOf(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Args().First(), err)
	}
	var want ed25519.PublicKey
	if s := c.String("steward"); s != "" {
		id, err := identity.ParseDIDKey(s)
		if err != nil {
			return fmt.Errorf("--steward: %w", err)
		}
		want = id.PublicKey()
	}
	sealed, err := receipt.Open(env, want)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Args().First(), err)
	}
	w := envOf(c).stdout
	r := &sealed.Receipt
	t := newTable(w, "Receipt", sealed.ID.String())
	t.row("Steward", r.Steward)
	pos := fmt.Sprintf("%d", r.Sequence)
	if r.Prev != nil {
		pos += ", prev " + short(r.Prev.String())
	}
	t.row("Sequence", pos)
	t.row("Served", r.Recipe+" on "+r.Backend)
	t.row("Tokens", fmt.Sprintf("%d in, %d out, %d accepted", r.TokensIn, r.TokensOut, r.TokensAccepted))
	if r.CutShort != "" {
		t.row("Cut short", cutWhy(r.CutShort))
	}
	if len(r.Stages) == 0 {
		t.row("Energy", fmt.Sprintf("%d µJ (%s)", r.Energy.UJ(), r.Energy.Provenance()))
	} else {
		// A split serve: Open has verified every report's signature under
		// the node it names, the ranges and the total (receipt.VerifyStages).
		// The total sums like with like: the measurements when every stage
		// has one, else only the estimates; graded as the weakest stage.
		t.row("Energy", fmt.Sprintf("%s, the total of %d stages:", r.Energy, len(r.Stages)))
		for i, s := range r.Stages {
			t.row(fmt.Sprintf("  stage %d", i), fmt.Sprintf("layers %d-%d on %s, %d positions: %s; signature valid",
				s.Lo, s.Hi, short(s.Node), s.Tokens, s.Energy))
		}
	}
	fid := "floor " + r.FidelityFloor.String()
	if r.Fidelity != nil {
		fid = fmt.Sprintf("%s delivered, %s advertised, %s", r.Fidelity.Delivered, r.Fidelity.Advertised, fid)
	}
	if r.FidelityMet {
		fid += ": met"
	} else {
		fid += ": not met"
	}
	t.row("Fidelity", fid)
	t.row("Signature", "valid")
	if path := c.String("log"); path != "" {
		pos, n, start, err := placeInLog(path, sealed)
		if err != nil {
			t.flush()
			return err
		}
		if start == 0 {
			t.row("Chain", fmt.Sprintf("entry %d of %d in %s; every link verifies from genesis", pos, n, path))
		} else {
			t.row("Chain", fmt.Sprintf("entry %d of %d in %s; every link verifies from receipt %d, where the log begins (links before it are not in it)",
				pos, n, path, start))
		}
	}
	return t.flush()
}

// placeInLog verifies the log under sealed's steward, link by link from
// its first receipt (genesis, or where the node's bounded log begins), and
// finds sealed in it. start is the first receipt's sequence.
func placeInLog(path string, sealed *receipt.Sealed) (index, n int, start uint64, err error) {
	envs, err := readLog(path)
	if err != nil {
		return 0, 0, 0, err
	}
	steward, err := identity.ParseDIDKey(sealed.Receipt.Steward)
	if err != nil {
		return 0, 0, 0, err
	}
	var head receipt.Head
	if len(envs) > 0 {
		// A log that begins past genesis is checked from its first
		// receipt's own position: the links before it are not in it.
		first, err := receipt.Open(envs[0], steward.PublicKey())
		if err != nil {
			return 0, 0, 0, fmt.Errorf("log %s: %w", path, &receipt.LinkError{Index: 0, Err: err})
		}
		if r := first.Receipt; r.Sequence > 0 && r.Prev != nil {
			head = receipt.Head{Next: r.Sequence, Last: *r.Prev}
		}
	}
	if _, err := receipt.VerifyLog(envs, head, steward.PublicKey()); err != nil {
		return 0, 0, 0, fmt.Errorf("log %s: %w", path, err)
	}
	for i, env := range envs {
		if receipt.Sum(env) == sealed.ID {
			return i, len(envs), head.Next, nil
		}
	}
	return 0, 0, 0, fmt.Errorf("log %s: the receipt is not in it (it holds %s, all verified)", path, plural(len(envs), "receipt"))
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReceiptFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxReceiptFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxReceiptFile)
	}
	return b, nil
}

// envelopeOf finds the envelope in a receipt file.
func envelopeOf(b []byte) ([]byte, error) {
	text := bytes.TrimSpace(b)
	switch {
	case len(text) > 0 && text[0] == '{':
		var doc struct {
			EnvelopeHex string `json:"envelope_hex"`
			Usage       struct {
				Energy struct {
					EnvelopeHex string `json:"envelope_hex"`
				} `json:"energy"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(text, &doc); err != nil {
			return nil, fmt.Errorf("not a receipt in JSON: %w", err)
		}
		h := doc.EnvelopeHex
		if h == "" {
			h = doc.Usage.Energy.EnvelopeHex
		}
		if err := severalChoices(text); h == "" && err != nil {
			return nil, err
		}
		if h == "" {
			return nil, errors.New("the JSON has no envelope_hex (nor usage.energy.envelope_hex)")
		}
		return decodeHex(h)
	case isHex(text):
		return decodeHex(string(text))
	}
	return b, nil
}

func decodeHex(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("envelope hex: %w", err)
	}
	if len(b) == 0 {
		// An envelope_hex of only spaces would otherwise be read as an
		// empty envelope, and fail later as a truncated one.
		return nil, errors.New("envelope hex: empty")
	}
	return b, nil
}

func isHex(b []byte) bool {
	if len(b) == 0 || len(b)%2 != 0 {
		return false
	}
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// readLog reads a receipt log: one envelope a line, hex or a JSON object
// carrying envelope_hex. Blank lines are skipped.
func readLog(path string) ([][]byte, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	var envs [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxReceiptFile)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		env, err := envelopeOf(text)
		if err == nil && !isHex(text) && text[0] != '{' {
			err = errors.New("want hex or a JSON object")
		}
		if err != nil {
			return nil, fmt.Errorf("log %s line %d: %w", path, line, err)
		}
		envs = append(envs, env)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("log %s: %w", path, err)
	}
	return envs, nil
}
