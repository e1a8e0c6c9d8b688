#!/usr/bin/env bash
# Through the node, as clients see it: aggregate completion tok/s and the
# p50/p99 time to first token at 1, 4, 8 and 32 concurrent streamed
# requests (two each, 32 tokens, distinct prompts) on a Llama-3.2-1B-shaped
# Q4_0 model (the one make bench-batch makes), for this tree's meshnode and,
# with BEFORE_REV set (a git revision, e.g. the commit before batching), for
# that revision's, built from `git archive` in a temp dir. Both run on the
# same config: the model with BENCH_THREADS threads (default: all CPUs), a
# 1024-token context, a queue deep enough that no request is refused.
# Knobs: BENCH_MODEL, BENCH_THREADS, BENCH_C (levels, default 1,4,8,32),
# BENCH_REQUESTS (per client, default 2), BENCH_TOKENS (default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${BENCH_MODEL:-${BENCH_CACHE:-$HOME/.cache/meshnode-bench}/llama-3.2-1b-shape-q4_0.gguf}
[ -f "$model" ] || { echo "no model at $model: run make bench-batch first (it makes it), or set BENCH_MODEL" >&2; exit 1; }
threads=${BENCH_THREADS:-$(nproc)}
GO=${GO:-go}

tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/after"
CGO_ENABLED=0 $GO build -o "$tmp/after/meshnode" ./cmd/meshnode
CGO_ENABLED=0 $GO test -c -o "$tmp/node.test" ./node
if [ -n "${BEFORE_REV:-}" ]; then
	mkdir -p "$tmp/before-src" "$tmp/before"
	git archive "$BEFORE_REV" | tar -x -C "$tmp/before-src"
	(cd "$tmp/before-src" && CGO_ENABLED=0 $GO build -o "$tmp/before/meshnode" ./cmd/meshnode)
fi
cat >"$tmp/config.toml" <<CONF
[[model]]
path = "$model"
name = "bench-1b"
threads = $threads
context = 1024

[api]
queue_depth = 256
CONF

wait_ready() { for _ in $(seq 600); do curl -sf "http://$1/health" >/dev/null && return 0; sleep 0.1; done; echo "node on $1 not ready" >&2; return 1; }

run() { # label binary port
	local label=$1 bin=$2 port=$3
	"$bin" --config "$tmp/config.toml" --state-dir "$tmp/state-$label" --discovery none \
		--http-addr "127.0.0.1:$port" --quic-addr "127.0.0.1:$((port + 1))" >"$tmp/$label.log" 2>&1 &
	local pid=$!
	wait_ready "127.0.0.1:$port"
	# One request first: the weights' pages come in, the scratch is made.
	curl -s "http://127.0.0.1:$port/v1/completions" -H "Content-Type: application/json" \
		-d '{"model":"bench-1b","prompt":"Warm up","max_tokens":8}' >/dev/null
	MESHNODE_LOAD_URL="http://127.0.0.1:$port" MESHNODE_LOAD_MODEL=bench-1b MESHNODE_LOAD_LABEL="$label" \
		MESHNODE_LOAD_C="${BENCH_C:-1,4,8,32}" MESHNODE_LOAD_REQUESTS="${BENCH_REQUESTS:-2}" MESHNODE_LOAD_TOKENS="${BENCH_TOKENS:-32}" \
		"$tmp/node.test" -test.run '^TestNodeLoad$' -test.count=1 -test.v | grep '^load' || { cat "$tmp/$label.log" >&2; exit 1; }
	echo "  ($label: $(grep -o '"slots":[0-9]*\|slots=[0-9]*' "$tmp/$label.log" | head -1), load average $(cut -d' ' -f1 /proc/loadavg))"
	kill $pid; wait $pid 2>/dev/null || true
}
if [ -n "${BEFORE_REV:-}" ]; then run before "$tmp/before/meshnode" 19500; fi
run after "$tmp/after/meshnode" 19510
