package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenAISDK runs every case of the OpenAI SDK harness
// (testdata/openai-sdk; its README says how to add a case), each a
// Node.js script using the official openai package, against a real node
// serving the built-in model on loopback.
func TestOpenAISDK(t *testing.T) {
	runSDKCases(t, filepath.Join("testdata", "openai-sdk"), "openai", "/v1", "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
}

// TestAnthropicSDK runs every case of the Anthropic SDK harness
// (testdata/anthropic-sdk), each a Node.js script using the official
// @anthropic-ai/sdk package, against the node's Messages API.
func TestAnthropicSDK(t *testing.T) {
	runSDKCases(t, filepath.Join("testdata", "anthropic-sdk"), "@anthropic-ai/sdk", "", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "ANTHROPIC_AUTH_TOKEN=")
}

// TestOllamaJS runs every case of the Ollama library harness
// (testdata/ollama-js), each a Node.js script using the official ollama
// package, against the node's Ollama API.
func TestOllamaJS(t *testing.T) {
	runSDKCases(t, filepath.Join("testdata", "ollama-js"), "ollama", "", "OLLAMA_HOST=")
}

// TestOpenAIAgents runs every case of the OpenAI Agents SDK harness
// (testdata/openai-agents), each a Node.js script running an agent of
// the @openai/agents package, whose function tools are strict, on the
// node's chat completions and Responses API.
func TestOpenAIAgents(t *testing.T) {
	runSDKCases(t, filepath.Join("testdata", "openai-agents"), "@openai/agents", "/v1", "OPENAI_API_KEY=", "OPENAI_BASE_URL=", "OPENAI_AGENTS_DISABLE_TRACING=1")
}

// runSDKCases starts a node serving the built-in model and runs each
// cases/*.mjs of the harness in dir with Node.js, MESHNODE_BASE_URL the
// node's address with basePath. It skips when Node.js or the harness's
// npm package pkg is not installed (.ci/run installs both); env clears
// the SDK's own settings.
func runSDKCases(t *testing.T, dir, pkg, basePath string, env ...string) {
	nodeJS, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js is not installed (`node` not in PATH); .ci/run installs it")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		t.Skipf("the %s npm package is not installed: run `npm ci` in %s (.ci/run does)", pkg, dir)
	}
	cases, err := filepath.Glob(filepath.Join(dir, "cases", "*.mjs"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no cases in %s: %v", dir, err)
	}
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	base := "http://" + n.HTTPAddr().String() + basePath
	for _, c := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(c), ".mjs"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, nodeJS, filepath.Base(c))
			cmd.Dir = filepath.Dir(c)
			cmd.Env = append(append(os.Environ(), "MESHNODE_BASE_URL="+base, "MESHNODE_MODEL="+fortunesModel, "NODE_NO_WARNINGS=1"), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		})
	}
}
