#!/usr/bin/env bash
# The Metal backend's checks in one call, for the first Apple Silicon Mac
# that runs them: the GPU tests (every kernel against the CPU backend on
# random inputs, the 20 parity fixtures' logits against the CPU engine,
# greedy decode by the device's argmax, the built-in model against
# llama.cpp's greedy ids), make bench-metal (prefill and decode tok/s, a
# decode's achieved bandwidth against the chip's), and llama.cpp's
# llama-bench on the same 1B-shaped files when it is installed. It prints
# a summary and leaves the logs in $OUT (default: a new temporary
# directory). It fails if any check failed or skipped: a skip means no
# Metal device was found, and nothing was checked on a GPU.
#
#   scripts/metal-check.sh --build     build the test binary for
#                                      darwin/arm64 into .metalcheck/
#                                      (git-ignored), for a Mac without Go
#   scripts/metal-check.sh             on the Mac: build it if Go is there,
#                                      else use .metalcheck/'s; run
#   scripts/metal-check.sh --stand-in  without a Mac: the same run on the
#                                      CPU stand-in (metal/metalemu; needs a
#                                      C++ compiler), short, to rehearse
#                                      this script
#
# Goals on hardware (issue #18): decode at 70% or more of the chip's
# bandwidth, and at least llama.cpp Metal's decode rate.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=$root/.metalcheck/metal.test

build() {
	mkdir -p .metalcheck
	CGO_ENABLED=0 GOOS=${1:-$(go env GOOS)} GOARCH=${2:-$(go env GOARCH)} go test -c -o "$bin" ./metal
}

standin=0
case "${1:-}" in
--build)
	build darwin arm64 && ls -l "$bin"
	exit
	;;
--stand-in)
	standin=1
	export MESHNODE_METAL_DEVICE=stand-in BENCH_1B=0 METAL_GREEDY_TOKENS=${METAL_GREEDY_TOKENS:-4}
	export BENCH_FIXTURE_PP=${BENCH_FIXTURE_PP:-8} BENCH_FIXTURE_TG=${BENCH_FIXTURE_TG:-4}
	;;
"") ;;
*)
	echo "usage: $0 [--build | --stand-in]" >&2
	exit 2
	;;
esac
if command -v go >/dev/null 2>&1; then
	build || exit 1
fi
if [ ! -x "$bin" ]; then
	echo "metal-check: no Go here and no $bin: run scripts/metal-check.sh --build where Go is, and carry .metalcheck" >&2
	exit 2
fi

OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/models"
echo "metal-check: logs in $OUT"
{
	uname -a
	sw_vers 2>/dev/null || echo "not macOS"
	sysctl -n machdep.cpu.brand_string hw.memsize 2>/dev/null || true
	system_profiler SPDisplaysDataType 2>/dev/null | grep -E 'Chipset Model|Total Number of Cores|Metal' || true
} >"$OUT/machine.txt"

cd "$root/metal" # the tests read ../models
start=$(date +%s)
timeout 900 "$bin" -test.run 'GPU' -test.v -test.timeout 880s >"$OUT/gpu-tests.log" 2>&1
tests=$?
mid=$(date +%s)
MESHNODE_BENCH_METAL=1 BENCH_DIR="$OUT/models" timeout 900 "$bin" -test.run '^$' -test.bench '^BenchmarkMetal$' -test.benchtime 1x -test.v \
	-test.timeout 880s >"$OUT/bench.log" 2>&1
bench=$?
end=$(date +%s)
skipped=0
if grep -qE '^ *--- SKIP' "$OUT/gpu-tests.log" "$OUT/bench.log"; then skipped=1; fi

# llama.cpp on the same files, when it is installed (brew install llama.cpp).
llama=""
if [ $standin -eq 0 ] && command -v llama-bench >/dev/null 2>&1; then
	for m in "$OUT"/models/llama-1b-*.gguf; do
		[ -f "$m" ] || continue
		llama-bench -m "$m" -p "${BENCH_PP:-512}" -n "${BENCH_TG:-128}" -ngl 99 -fa 0 -o md >>"$OUT/llama-bench.log" 2>&1
	done
	llama=$OUT/llama-bench.log
fi

{
	echo "== machine"
	head -n 12 "$OUT/machine.txt"
	echo
	echo "== GPU tests: exit $tests, $((mid - start)) s"
	awk '/^(    )*--- (PASS|FAIL|SKIP)/ { printf "%-44s %-5s %s\n", $3, $2, $4 }' "$OUT/gpu-tests.log"
	grep -E 'device:|worst relative error|max \|Δlogit\||argmax decode:|built-in model:|stats:|no Metal device|panic|FAIL' "$OUT/gpu-tests.log" |
		sed 's/^ *//' | sort | uniq -c | sort -rn | head -40
	echo
	echo "== make bench-metal: exit $bench, $((end - mid)) s"
	sed -n '/^device:/,/^goos:/p' "$OUT/bench.log" | grep -v '^goos:'
	grep -E 'Benchmark|SKIP|FAIL|panic' "$OUT/bench.log" || true
	if [ -n "$llama" ]; then
		echo
		echo "== llama.cpp llama-bench (Metal), the same files"
		grep -E '^\|' "$llama" || cat "$llama"
		echo "goal: our decode tok/s (above) at least llama.cpp's tg${BENCH_TG:-128} t/s, and at least 70% of nominal bandwidth"
	elif [ $standin -eq 0 ]; then
		echo
		echo "llama-bench not installed: no llama.cpp comparison (brew install llama.cpp, then rerun)"
	fi
	if [ $skipped -eq 1 ]; then
		echo
		echo "SKIPPED: some checks found no Metal device (see the logs); nothing was checked on a GPU"
	fi
	if [ $standin -eq 1 ]; then
		echo
		echo "(a rehearsal on the CPU stand-in: no GPU was involved)"
	fi
} | tee "$OUT/summary.txt"

[ $tests -eq 0 ] && [ $bench -eq 0 ] && [ $skipped -eq 0 ]
