package node

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestSillyTavern: SillyTavern's text completion against a node, on the
// built-in model, as it talks to llama.cpp and to Ollama: the bodies its
// createTextGenGenerationData builds with its default settings
// (testdata/sillytavern) are served, streamed as its llama.cpp reader
// reads them, and the answer is the one the same settings give under
// llama.cpp's own names; the calls it makes besides (the status check,
// its API tokenizer, props) answer.
func TestSillyTavern(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	body, err := os.ReadFile("testdata/sillytavern/llamacpp.json")
	if err != nil {
		t.Fatal(err)
	}

	// Streamed: SillyTavern reads each event's content, and its
	// completion_probabilities where it asked for them.
	resp := post(t, n, "/completion", string(body))
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/completion: %d %s", resp.StatusCode, b)
	}
	var streamed strings.Builder
	stopped := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Content string `json:"content"`
			Stop    bool   `json:"stop"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if stopped {
			t.Fatalf("event %s after the last", data)
		}
		streamed.WriteString(ev.Content)
		stopped = ev.Stop
	}
	if !stopped || strings.TrimSpace(streamed.String()) == "" {
		t.Fatalf("stream: %q, stopped %v", streamed.String(), stopped)
	}

	// The same settings, each once under llama.cpp's name.
	plain := llamaContent(t, n, "/completion", `{"prompt":"A fortune for the day:\n","n_predict":24,"temperature":0.7,"top_p":0.5,"top_k":40,"min_p":0,
		"seed":7,"repeat_penalty":1.2,"repeat_last_n":0,"stop":["\nUser:","\nYou:"]}`)
	if plain != streamed.String() {
		t.Errorf("SillyTavern's body answered %q; llama.cpp's names %q", streamed.String(), plain)
	}

	// As it talks to Ollama: its options, with mirostat's off values.
	ollama, err := os.ReadFile("testdata/sillytavern/ollama.json")
	if err != nil {
		t.Fatal(err)
	}
	resp = post(t, n, "/api/generate", strings.Replace(string(ollama), `"meshnode-fortunes"`, `"`+fortunesModel+`"`, 1))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var gen struct {
		Response string `json:"response"`
		Done     bool   `json:"done"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &gen) != nil || !gen.Done {
		t.Fatalf("/api/generate: %d %s", resp.StatusCode, b)
	}
	if gen.Response != plain {
		t.Errorf("Ollama's options answered %q; /completion %q", gen.Response, plain)
	}

	// What it asks besides: the status check, its API tokenizer both
	// ways, and the server's props.
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/v1/models", "", `"data"`},
		{"POST", "/tokenize", `{"content":"A fortune"}`, `"tokens"`},
		{"POST", "/detokenize", `{"tokens":[319,19717]}`, `"content"`},
		{"GET", "/props", "", `"default_generation_settings"`},
	} {
		req, _ := http.NewRequest(c.method, "http://"+n.HTTPAddr().String()+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, b)
		}
	}
}

// llamaContent posts an unstreamed /completion (or /infill) and returns
// its content; anything but a 200 fails the test.
func llamaContent(t *testing.T, n *Node, path, body string) string {
	t.Helper()
	resp := post(t, n, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var c struct {
		Content string `json:"content"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &c) != nil {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	return c.Content
}
