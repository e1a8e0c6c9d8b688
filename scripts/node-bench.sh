#!/usr/bin/env bash
# Measures what a user of the daemon sees: binary sizes, the idle resident
# memory of meshnode with no GGUF model (the reference engine, which the
# config must name) and with the built-in model, before and after one generation, and the API overhead
# and throughput benchmarks of ./node.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
printf '%-22s %s\n' "binary" "size"
for b in bin/meshnode bin/meshcli; do printf '%-22s %.1f MiB\n' "$b" "$(echo "$(stat -c %s "$b") / 1048576" | bc -l)"; done

tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
rss() { awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' "/proc/$1/status"; }
wait_ready() { for _ in $(seq 100); do curl -sf "http://$1/health" >/dev/null && return 0; sleep 0.1; done; echo "node on $1 not ready" >&2; return 1; }

run() { # name port env...
	local name=$1 port=$2; shift 2
	env "$@" bin/meshnode --state-dir "$tmp/$name" --discovery none --http-addr "127.0.0.1:$port" --quic-addr "127.0.0.1:$((port + 1))" >"$tmp/$name.log" 2>&1 &
	local pid=$!
	wait_ready "127.0.0.1:$port"
	local model
	model=$(curl -s "http://127.0.0.1:$port/v1/models" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
	local idle; idle=$(rss $pid)
	curl -s "http://127.0.0.1:$port/v1/completions" -H "Content-Type: application/json" -d "{\"model\":\"$model\",\"prompt\":\"The\",\"max_tokens\":32}" >/dev/null
	printf '%-22s idle %s, after one 32-token generation %s (%s)\n' "$name" "$idle" "$(rss $pid)" "$model"
	kill $pid; wait $pid 2>/dev/null || true
}
echo
run reference-engine 19400 MESHNODE_DEFAULT_MODEL=none MESHNODE_MODEL=mesh-reference
run builtin-model 19410 MESHNODE_DEFAULT_MODEL="$PWD/models/meshnode-fortunes-q8_0.gguf"
echo
go test -run '^$' -bench . -benchtime 200x ./node/ | grep -E '^Benchmark|ok'
