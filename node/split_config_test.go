package node

import (
	"strings"
	"testing"
	"time"
)

func TestSplitConfig(t *testing.T) {
	id := strings.Repeat("ab", 32)
	c, err := ParseConfig([]byte(`
state_dir = "/s"
memory_budget = "6GiB"
[stages]
headroom = 1048576
max_rtt = "20ms"
[[model]]
path = "big"
split = "always"
pins = ["self:0-4", "` + id + `:4-8"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if c.MemoryBudget != 6<<30 || c.Stages.Headroom != 1<<20 || c.Stages.MaxRTT.Duration != 20*time.Millisecond || !c.Stages.StageServe() {
		t.Errorf("%+v %+v", c.MemoryBudget, c.Stages)
	}
	if c.Model[0].Split != SplitAlways {
		t.Errorf("split %q", c.Model[0].Split)
	}
	p, err := ParsePin(c.Model[0].Pins[1])
	if err != nil || p != (PinConfig{Node: id, Lo: 4, Hi: 8}) {
		t.Errorf("pin %+v, %v", p, err)
	}

	d := Config{StateDir: "/s", Model: []ModelConfig{{Path: "x"}}}
	if err := d.Resolve(); err != nil {
		t.Fatal(err)
	}
	if d.Model[0].Split != SplitAuto || d.Stages.Headroom != DefaultStageHeadroom || d.Stages.MaxRTT.Duration != DefaultStageMaxRTT {
		t.Errorf("defaults: %+v %+v", d.Model[0], d.Stages)
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"6GiB": 6 << 30, "512MB": 512e6, "1.5KiB": 1536, "4096": 4096, "10 B": 10} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1GiB", "six", "NaN", "1e30GiB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

func TestSplitConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		toml, want string
	}{
		{`memory_budget = 1000`, "memory_budget"},
		{`memory_budget = "2PiB"`, "memory_budget"},
		{`memory_budget = "2000TiB"`, "memory_budget"},
		{"[stages]\nmax_rtt = \"1m\"", "stages.max_rtt"},
		{"[[model]]\npath = \"x\"\nsplit = \"sometimes\"", "split"},
		{"[[model]]\npath = \"x\"\npins = [\"peer:0-4\"]", "pin"},
		{"[[model]]\npath = \"x\"\npins = [\"self:4-2\"]", "pin"},
		{"[[model]]\npath = \"x\"\nsplit = \"never\"\npins = [\"self:0-2\"]", "never"},
	} {
		c, err := ParseConfig([]byte("state_dir = \"/s\"\n" + tc.toml))
		if err == nil {
			err = c.Resolve()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.toml, err, tc.want)
		}
	}
	// Owner control may stage a budget and split settings: they only
	// limit what the node holds, and Resolve bounds them.
	if err := CheckStagedConfig([]byte("memory_budget = \"4GiB\"\n[[model]]\npath = \"x\"\nsplit = \"always\"")); err != nil {
		t.Error(err)
	}
}
