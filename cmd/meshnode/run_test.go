package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/encoder/encodertest"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node"
)

// The built-in model (committed) and llama.cpp's greedy ids for it.
var (
	runModel     = filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	runReference = filepath.Join("..", "..", "models", "reference-greedy.txt")
)

// meshnodeRun runs `meshnode run ARGS...` in process and returns its
// stdout and stderr.
func meshnodeRun(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	app.Reader = strings.NewReader("") // never the test's own stdin
	err = app.Run(append([]string{"meshnode", "run"}, args...))
	return out.String(), errOut.String(), err
}

// meshnodeRunInput is meshnodeRun with stdin and global flags before
// "run".
func meshnodeRunInput(t *testing.T, stdin string, global []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	app.Reader = strings.NewReader(stdin)
	err = app.Run(append(append(append([]string{"meshnode"}, global...), "run"), args...))
	return out.String(), errOut.String(), err
}

// TestRunGreedyMatchesLlamaCpp: `meshnode run` prints the prompt and then
// llama.cpp's greedy continuation on stdout, whether the flags come before
// or after the model, and its rates on stderr.
func TestRunGreedyMatchesLlamaCpp(t *testing.T) {
	cases, err := modeltest.ReadGreedyReference(runReference)
	if err != nil {
		t.Fatal(err)
	}
	var ref *modeltest.GreedyCase
	for i := range cases {
		if cases[i].File == filepath.Base(runModel) {
			ref = &cases[i]
			break
		}
	}
	if ref == nil {
		t.Fatalf("%s has no case for %s", runReference, filepath.Base(runModel))
	}
	f, err := gguf.Open(runModel)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "A man walks into a bar" // the reference's first prompt
	if ids := tok.Encode(prompt, tokenizer.EncodeOptions{AddSpecial: true}); !slices.Equal(ids, ref.Prompt) {
		t.Fatalf("%q encodes to %v, the reference's prompt is %v", prompt, ids, ref.Prompt)
	}
	const n = 12
	gen, err := tok.Decode(ref.Generated[:n], tokenizer.DecodeOptions{Continue: true})
	if err != nil {
		t.Fatal(err)
	}
	want := prompt + gen + "\n"

	for _, args := range [][]string{
		{runModel, "-p", prompt, "-n", "12", "-t", "1"},
		{"--max-tokens", "12", "--prompt", prompt, "--threads", "2", runModel},
	} {
		stdout, stderr, err := meshnodeRun(t, args...)
		if err != nil {
			t.Fatalf("run %q: %v\n%s", args, err, stderr)
		}
		if stdout != want {
			t.Errorf("run %q: stdout\n%q\nwant llama.cpp's greedy\n%q", args, stdout, want)
		}
		rates := regexp.MustCompile(`(?m)^prompt: \d+ tokens in .* \([\d.]+ tok/s\)\noutput: 12 tokens, [\d.]+ tok/s after the first$`)
		if !rates.MatchString(stderr) || !strings.Contains(stderr, "llama Q8_0, 4 layers") {
			t.Errorf("run %q: stderr lacks the model and rates:\n%s", args, stderr)
		}
	}

	// A repeat penalty (1.5; llama.cpp's greedy output repeats "a man who")
	// reaches the sampler.
	stdout, stderr, err := meshnodeRun(t, runModel, "-p", prompt, "-n", "12", "--repeat-penalty", "1.5")
	if err != nil {
		t.Fatalf("--repeat-penalty: %v\n%s", err, stderr)
	}
	if stdout == want || !strings.HasPrefix(stdout, prompt) {
		t.Errorf("--repeat-penalty 1.5: stdout %q, want the prompt and other text than greedy's", stdout)
	}
	// --repeat-last-n 0 turns the penalties off, as llama-cli's does;
	// 1 counts only the last token, so the penalty changes less than
	// over the default 64 (which reach into the prompt).
	if off, stderr, err := meshnodeRun(t, runModel, "-p", prompt, "-n", "12", "--repeat-penalty", "1.5", "--repeat-last-n", "0"); err != nil || off != want {
		t.Errorf("--repeat-last-n 0: %v, stdout %q, want greedy's %q\n%s", err, off, want, stderr)
	}
	if one, stderr, err := meshnodeRun(t, runModel, "-p", prompt, "-n", "12", "--repeat-penalty", "1.5", "--repeat-last-n", "1"); err != nil || one == stdout {
		t.Errorf("--repeat-last-n 1: %v, stdout %q, the same as over 64 tokens\n%s", err, one, stderr)
	}
	// DRY, llama-cli's flags: the repeat of "a man who" is penalised;
	// with "a" a breaker, "man" holds one, so it is never penalised and
	// no repeat reaches back past it; --dry-penalty-last-n 0 is off.
	dry := []string{runModel, "-p", prompt, "-n", "16", "--dry-multiplier", "1.5", "--dry-allowed-length", "1"}
	long, _, err := meshnodeRun(t, runModel, "-p", prompt, "-n", "16")
	if err != nil {
		t.Fatal(err)
	}
	dried, stderr, err := meshnodeRun(t, dry...)
	if err != nil || dried == long || !strings.HasPrefix(dried, prompt) {
		t.Errorf("--dry-multiplier 1.5: %v, stdout %q, want other text than greedy's %q\n%s", err, dried, long, stderr)
	}
	if off, stderr, err := meshnodeRun(t, append(dry, "--dry-penalty-last-n", "0")...); err != nil || off != long {
		t.Errorf("--dry-penalty-last-n 0: %v, stdout %q, want greedy's %q\n%s", err, off, long, stderr)
	}
	if broken, stderr, err := meshnodeRun(t, append(dry, "--dry-sequence-breaker", "a")...); err != nil || broken != long {
		t.Errorf("--dry-sequence-breaker a: %v, stdout %q, want greedy's %q\n%s", err, broken, long, stderr)
	}
	if _, _, err := meshnodeRun(t, runModel, "-p", prompt, "--temp", "0.8", "--typical", "1.5"); err == nil {
		t.Error("--typical 1.5 accepted")
	}
	if out, stderr, err := meshnodeRun(t, runModel, "-p", prompt, "-n", "12", "--temp", "0.8", "--seed", "3", "--typical", "0.5", "--xtc-probability", "0.5", "--top-nsigma", "2", "--min-keep", "2"); err != nil || !strings.HasPrefix(out, prompt) {
		t.Errorf("llama.cpp's filters: %v, stdout %q\n%s", err, out, stderr)
	}
}

// TestRunDraft: with --draft (here the model itself, and prompt lookup)
// the greedy output is the same, and the run says what it speculated; a
// draft that is no model is refused.
func TestRunDraft(t *testing.T) {
	const prompt = "A man walks into a bar"
	want, _, err := meshnodeRun(t, runModel, "-p", prompt, "-n", "16")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{runModel, "lookup"} {
		stdout, stderr, err := meshnodeRun(t, runModel, "-p", prompt, "-n", "16", "--draft", d)
		if err != nil {
			t.Fatalf("--draft %s: %v\n%s", d, err, stderr)
		}
		if stdout != want {
			t.Errorf("--draft %s: %q, want %q", d, stdout, want)
		}
	}
	if _, _, err := meshnodeRun(t, runModel, "-p", prompt, "--draft", filepath.Join(t.TempDir(), "none.gguf")); err == nil || !strings.Contains(err.Error(), "--draft") {
		t.Errorf("a missing draft: %v", err)
	}
}

// TestRunSampling: a seeded sampled run repeats itself; another seed
// gives other text.
func TestRunSampling(t *testing.T) {
	run := func(seed string) string {
		stdout, stderr, err := meshnodeRun(t, runModel, "-p", "Love is", "-n", "24", "--temp", "1.2", "--top-k", "40", "--top-p", "0.95", "--seed", seed)
		if err != nil {
			t.Fatalf("seed %s: %v\n%s", seed, err, stderr)
		}
		return stdout
	}
	a, b, c := run("7"), run("7"), run("8")
	if a != b {
		t.Errorf("seed 7 twice:\n%q\n%q", a, b)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 both gave %q", a)
	}
}

// TestRunMirostat: --mirostat samples with mirostat: seeded, it repeats
// itself and differs from the plain seeded sample; at a target of 0.01
// bits it keeps the likeliest token alone, the greedy output; with a
// draft it decodes without speculating (its state moves a token at a
// time), to the same text; beside a filter, or out of range, refused.
func TestRunMirostat(t *testing.T) {
	const prompt = "Love is"
	plain := runWith(t, prompt, "24", "--temp", "1", "--seed", "5")
	m := runWith(t, prompt, "24", "--temp", "1", "--seed", "5", "--mirostat", "2", "--mirostat-ent", "3")
	if m == plain || runWith(t, prompt, "24", "--temp", "1", "--seed", "5", "--mirostat", "2", "--mirostat-ent", "3") != m {
		t.Errorf("--mirostat 2: %q, plain %q (and it must repeat itself)", m, plain)
	}
	if got := runWith(t, prompt, "24", "--temp", "1", "--seed", "5", "--mirostat", "2", "--mirostat-ent", "3", "--draft", "lookup"); got != m {
		t.Errorf("--mirostat 2 with --draft lookup: %q, without %q", got, m)
	}
	if got, greedy := runWith(t, prompt, "24", "--temp", "1", "--seed", "5", "--mirostat", "1", "--mirostat-ent", "0.01", "--mirostat-lr", "1"), greedyRun(t, prompt, "24"); got != greedy {
		t.Errorf("--mirostat 1 at 0.01 bits: %q, want the greedy %q", got, greedy)
	}
	for _, args := range [][]string{
		{"--temp", "1", "--mirostat", "2", "--top-k", "40"},
		{"--temp", "1", "--mirostat", "3"},
		{"--temp", "1", "--mirostat", "2", "--mirostat-lr", "2"},
		{"--mirostat", "2"},
	} {
		if _, _, err := meshnodeRun(t, append([]string{runModel, "-p", prompt}, args...)...); err == nil || !strings.Contains(err.Error(), "mirostat") {
			t.Errorf("%q: %v, want a refusal naming mirostat", args, err)
		}
	}
}

// TestRunAdaptiveP: --adaptive-target makes the last draw adaptive-p's:
// seeded, it repeats itself and differs from the plain seeded sample;
// with a draft it decodes without speculating, to the same text; out of
// range, refused.
func TestRunAdaptiveP(t *testing.T) {
	const prompt = "Love is"
	base := []string{"--temp", "1", "--seed", "5", "--min-p", "0.05"}
	plain := runWith(t, prompt, "24", base...)
	on := append(base, "--adaptive-target", "0.1")
	a := runWith(t, prompt, "24", on...)
	if a == plain || runWith(t, prompt, "24", on...) != a {
		t.Errorf("--adaptive-target 0.1: %q, plain %q (and it must repeat itself)", a, plain)
	}
	if got := runWith(t, prompt, "24", append(on, "--draft", "lookup")...); got != a {
		t.Errorf("--adaptive-target with --draft lookup: %q, without %q", got, a)
	}
	for _, args := range [][]string{{"--temp", "1", "--adaptive-target", "1.5"}, {"--temp", "1", "--adaptive-target", "0.5", "--adaptive-decay", "1"}} {
		if _, _, err := meshnodeRun(t, append([]string{runModel, "-p", prompt}, args...)...); err == nil || !strings.Contains(err.Error(), "adaptive-p") {
			t.Errorf("%q: %v, want a refusal naming adaptive-p", args, err)
		}
	}
}

// TestRunIgnoreEOS: --ignore-eos writes on where the model would end: a
// greedy continuation that ended early runs longer, beginning as it did.
func TestRunIgnoreEOS(t *testing.T) {
	short := greedyRun(t, "Love is", "96")
	long := runWith(t, "Love is", "96", "--ignore-eos")
	if len(long) <= len(short) || !strings.HasPrefix(long, strings.TrimSuffix(short, "\n")) {
		t.Errorf("--ignore-eos: %q; without it %q", long, short)
	}
}

// TestRunLogitBias: --logit-bias forces a token (+100) or bans one
// (−100) from the greedy continuation.
func TestRunLogitBias(t *testing.T) {
	// 278 is "▁the", 263 "▁a".
	if got := runWith(t, "Love is", "4", "--logit-bias", "278+100"); got != "Love is the the the the\n" {
		t.Errorf("the forced: %q", got)
	}
	greedy := greedyRun(t, "Love is", "8")
	if !strings.Contains(greedy, " a ") {
		t.Fatalf("the greedy continuation %q holds no \" a \" to ban", greedy)
	}
	if got := runWith(t, "Love is", "8", "--logit-bias", "263-100"); got == greedy || strings.Contains(got, " a ") {
		t.Errorf("a banned: %q (greedy %q)", got, greedy)
	}
}

// runWith is `meshnode run` of the built-in model on prompt, n tokens,
// with more flags.
func runWith(t *testing.T, prompt, n string, flags ...string) string {
	t.Helper()
	stdout, stderr, err := meshnodeRun(t, append([]string{runModel, "-p", prompt, "-n", n}, flags...)...)
	if err != nil {
		t.Fatalf("run %q: %v\n%s", flags, err, stderr)
	}
	return stdout
}

func TestRunErrors(t *testing.T) {
	enc, err := encodertest.Fixture("bert")
	if err != nil {
		t.Fatal(err)
	}
	encoderPath := filepath.Join(t.TempDir(), "bert.gguf")
	if err := os.WriteFile(encoderPath, enc, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", "hi"}, "give one model file"},
		{[]string{runModel, runModel, "-p", "hi"}, "got 2 arguments"},
		{[]string{runModel, "--no-such-flag"}, "no-such-flag"},
		{[]string{filepath.Join(t.TempDir(), "missing.gguf"), "-p", "hi"}, `missing.gguf": no such file`},
		{[]string{"no-such-model", "-p", "hi"}, "a model's name in"},
		{[]string{runModel}, "no prompt: give -p TEXT, pipe the text on stdin"},
		{[]string{runModel, "-p", "hi", "-i"}, "give one of them"},
		{[]string{runModel, "-p", "hi", "--kv", "q4"}, "q4"},
		{[]string{runModel, "-p", "hi", "--temp", "0.5", "--top-p", "2"}, "top_p"},
		{[]string{runModel, "-p", "hi", "--repeat-penalty", "-1"}, "repeat penalty"},
		{[]string{runModel, "-p", "hi", "--repeat-last-n", "-2"}, "--repeat-last-n -2"},
		{[]string{runModel, "-p", "hi", "--logit-bias", "278"}, "want TOKEN+BIAS or TOKEN-BIAS"},
		{[]string{runModel, "-p", "hi", "--logit-bias", "the+1"}, `"the" is not a token id`},
		{[]string{runModel, "-p", "hi", "--logit-bias", "278+101"}, "from -100 to 100"},
		{[]string{runModel, "-p", "hi", "--logit-bias", "278+1", "--logit-bias", "278-1"}, "biased twice"},
		{[]string{runModel, "-p", "hi", "--logit-bias", "32000+1"}, "outside the vocabulary of 32000"},
		{[]string{encoderPath, "-p", "hi"}, "is a text encoder (an embedding model or a reranker): it generates no text"},
	} {
		stdout, _, err := meshnodeRun(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q: err %v, want one mentioning %q", tc.args, err, tc.want)
		}
		if stdout != "" {
			t.Errorf("run %q failed but wrote %q", tc.args, stdout)
		}
	}
}

// greedyRun is the built-in model's greedy continuation of prompt, n
// tokens, as `meshnode run -p` prints it.
func greedyRun(t *testing.T, prompt string, n string) string {
	t.Helper()
	stdout, stderr, err := meshnodeRun(t, runModel, "-p", prompt, "-n", n)
	if err != nil {
		t.Fatalf("run -p %q: %v\n%s", prompt, err, stderr)
	}
	return stdout
}

// TestRunByName: meshnode run takes what --model takes: a file's name in
// the models dir (with or without .gguf) and the built-in model's name,
// found wherever the node finds it (here, in the checkout that built the
// test), not only a path.
func TestRunByName(t *testing.T) {
	want := greedyRun(t, "Love is", "6")
	isolate(t)
	dir := t.TempDir()
	blob, err := os.ReadFile(runModel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fortunes-copy.gguf"), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		global []string
		model  string
	}{
		{nil, node.BuiltinModelName},
		{[]string{"--models-dir", dir}, "fortunes-copy"},
		{[]string{"--models-dir", dir}, "fortunes-copy.gguf"},
	} {
		stdout, stderr, err := meshnodeRunInput(t, "", tc.global, tc.model, "-p", "Love is", "-n", "6")
		if err != nil || stdout != want {
			t.Errorf("run %s: %v: %q, want %q\n%s", tc.model, err, stdout, want, stderr)
		}
	}
}

// TestRunStdin: without -p, text piped on stdin is the prompt (its final
// newline dropped), as with -p.
func TestRunStdin(t *testing.T) {
	want := greedyRun(t, "A man walks into a bar", "8")
	stdout, stderr, err := meshnodeRunInput(t, "A man walks into a bar\n", nil, runModel, "-n", "8")
	if err != nil || stdout != want {
		t.Fatalf("piped: %v: %q, want %q\n%s", err, stdout, want, stderr)
	}
}

// TestRunInteractive: with -i (the default on a terminal without -p)
// each line read is answered in turn. The built-in model has no chat
// template, so each line is continued as -p would continue it; with
// --chat the lines are a conversation, which /clear forgets.
func TestRunInteractive(t *testing.T) {
	a, b := greedyRun(t, "A man walks into a bar", "8"), greedyRun(t, "Love is", "8")
	stdout, stderr, err := meshnodeRunInput(t, "A man walks into a bar\n\nLove is\n/bye\nnever read\n", nil, runModel, "-i", "-n", "8")
	if err != nil {
		t.Fatalf("-i: %v\n%s", err, stderr)
	}
	if want := strings.TrimPrefix(a, "A man walks into a bar") + strings.TrimPrefix(b, "Love is"); stdout != want {
		t.Errorf("-i answered\n%q\nwant each line continued\n%q", stdout, want)
	}
	if strings.Count(stderr, ">>> ") != 4 || !strings.Contains(stderr, "each line is continued as text") {
		t.Errorf("-i: stderr\n%s", stderr)
	}

	// A conversation: the second "Hi" is answered with the first exchange
	// before it; after /clear, as the first was.
	stdout, stderr, err = meshnodeRunInput(t, "Hi\nHi\n/clear\nHi\n", nil, runModel, "-i", "--chat", "-n", "8")
	if err != nil {
		t.Fatalf("-i --chat: %v\n%s", err, stderr)
	}
	answers := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(answers) != 3 || answers[0] != answers[2] || answers[0] == answers[1] || !strings.Contains(stderr, "forgotten") {
		t.Errorf("-i --chat answers %q (want the first and third alike, the second with the conversation before it)\n%s", answers, stderr)
	}
}
