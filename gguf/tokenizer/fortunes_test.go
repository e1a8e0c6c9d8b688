package tokenizer

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
)

// fortunesDirs are where the project's demo model may be: the repository's
// copy once it has one, then the team's shared folder.
var fortunesDirs = []string{"../../testdata/models", "/work/shared/models"}

type greedyCase struct {
	model, prompt string
	promptIDs     []uint32
	generated     []uint32
	text          string // the first line of the generated text
}

// readGreedy parses reference-greedy.txt, llama.cpp's greedy runs on the
// fortunes model.
func readGreedy(t *testing.T, path string) []greedyCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := regexp.MustCompile(`^### (\S+)\s+prompt: "(.*)"  \(`)
	ids := func(s string) []uint32 {
		var out []uint32
		for _, f := range strings.Fields(s) {
			v, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out = append(out, uint32(v))
		}
		return out
	}
	var cs []greedyCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := head.FindStringSubmatch(line); m != nil {
			cs = append(cs, greedyCase{model: m[1], prompt: m[2]})
			continue
		}
		if len(cs) == 0 {
			continue
		}
		c := &cs[len(cs)-1]
		if _, rest, ok := strings.Cut(line, "prompt ids"); ok {
			_, list, _ := strings.Cut(rest, ":")
			c.promptIDs = ids(list)
		} else if _, rest, ok := strings.Cut(line, "generated ids"); ok {
			_, list, _ := strings.Cut(rest, ":")
			c.generated = ids(list)
		} else if text, ok := strings.CutPrefix(line, "generated text: "); ok {
			c.text = text
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestFortunesPrompts checks the project's demo model against llama.cpp:
// the prompts encode to the ids llama.cpp fed the model, and the ids it
// generated decode to the text it printed.
func TestFortunesPrompts(t *testing.T) {
	var dir string
	for _, d := range fortunesDirs {
		if _, err := os.Stat(filepath.Join(d, "reference-greedy.txt")); err == nil {
			dir = d
			break
		}
	}
	if dir == "" {
		t.Skip("meshnode-fortunes model and reference-greedy.txt not found")
	}
	cases := readGreedy(t, filepath.Join(dir, "reference-greedy.txt"))
	if len(cases) == 0 {
		t.Fatal("no cases in reference-greedy.txt")
	}
	toks := map[string]*Tokenizer{}
	for _, c := range cases {
		tk := toks[c.model]
		if tk == nil {
			f, err := gguf.Open(filepath.Join(dir, c.model))
			if err != nil {
				t.Fatal(err)
			}
			tk, err = FromGGUF(f.Metadata)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			toks[c.model] = tk
		}
		got := tk.Encode(c.prompt, EncodeOptions{AddSpecial: true})
		if !equalIDs(got, c.promptIDs) {
			t.Errorf("%s: Encode(%q) = %v, want %v", c.model, c.prompt, got, c.promptIDs)
		}
		text, err := tk.Decode(c.generated, DecodeOptions{Continue: true})
		if err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(text, "\n"); first != c.text {
			t.Errorf("%s: generation after %q decodes to %q, llama.cpp printed %q", c.model, c.prompt, first, c.text)
		}
	}
}
