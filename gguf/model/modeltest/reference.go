package modeltest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// GreedyCase is one entry of models/reference-greedy.txt: llama.cpp's
// greedy token ids for a prompt on one of the meshnode-fortunes files.
type GreedyCase struct {
	File      string // the model file's name
	Prompt    []uint32
	Generated []uint32
}

// ReadGreedyReference parses a reference-greedy.txt (see ParseGreedy).
func ReadGreedyReference(path string) ([]GreedyCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cases, err := ParseGreedy(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cases, nil
}

// ParseGreedy reads the "prompt ids (n): …" and "generated ids (n): …"
// lines that llama.cpp's greedy tool (tools/llamacpp-ref) prints, in
// sections headed "### FILE …" as reference-greedy.txt has them; ids
// before any heading make a case of their own.
func ParseGreedy(r io.Reader) ([]GreedyCase, error) {
	var cases []GreedyCase
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "### "); ok {
			name, _, _ = strings.Cut(name, " ")
			cases = append(cases, GreedyCase{File: name})
			continue
		}
		isPrompt, isGen := strings.HasPrefix(line, "prompt ids"), strings.HasPrefix(line, "generated ids")
		if !isPrompt && !isGen {
			continue
		}
		if len(cases) == 0 {
			cases = append(cases, GreedyCase{})
		}
		dst := &cases[len(cases)-1].Generated
		if isPrompt {
			dst = &cases[len(cases)-1].Prompt
		}
		_, list, _ := strings.Cut(line, ":")
		for _, field := range strings.Fields(list) {
			v, err := strconv.ParseUint(field, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			*dst = append(*dst, uint32(v))
		}
	}
	return cases, sc.Err()
}
