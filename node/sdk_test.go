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

// sdkDir holds the OpenAI SDK harness (its README says how to add a case).
var sdkDir = filepath.Join("testdata", "openai-sdk")

// TestOpenAISDK runs every case of the OpenAI SDK harness, each a
// Node.js script using the official openai package, against a real node
// serving the built-in model on loopback. It skips when Node.js or the
// installed package is absent (.ci/run installs both).
func TestOpenAISDK(t *testing.T) {
	nodeJS, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js is not installed (`node` not in PATH); .ci/run installs it")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "openai", "package.json")); err != nil {
		t.Skipf("the openai npm package is not installed: run `npm ci` in %s (.ci/run does)", sdkDir)
	}
	cases, err := filepath.Glob(filepath.Join(sdkDir, "cases", "*.mjs"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no cases in %s: %v", sdkDir, err)
	}
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	base := "http://" + n.HTTPAddr().String() + "/v1"
	for _, c := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(c), ".mjs"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, nodeJS, filepath.Base(c))
			cmd.Dir = filepath.Dir(c)
			cmd.Env = append(os.Environ(), "MESHNODE_BASE_URL="+base, "MESHNODE_MODEL="+fortunesModel,
				"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "NODE_NO_WARNINGS=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		})
	}
}
