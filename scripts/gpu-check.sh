#!/usr/bin/env bash
# The CUDA backend's GPU checks in one call, on a machine with an NVIDIA GPU
# and its driver (libcuda.so.1): the GPU tests (every kernel against the CPU
# backend on random inputs, the fixtures' logits against the CPU engine,
# greedy decode by the device's argmax, graphs against eager launches) and
# make bench-cuda. It prints a summary table and leaves the logs in $OUT
# (default: a new temporary directory).
#
#   scripts/gpu-check.sh --build   where Go is: build the test binary into
#                                  .gpucheck/ (git-ignored) for a machine
#                                  without Go
#   scripts/gpu-check.sh           on the GPU machine: build it if Go is
#                                  there, else use .gpucheck/'s; run
#   scripts/gpu-check.sh --stand-in  without a GPU: the same run on the CPU
#                                  stand-in for libcuda (cuda/cudaemu; needs
#                                  a C++ compiler), fixtures only and short,
#                                  to rehearse this script
#   scripts/gpu-check.sh --profile on the GPU machine: what a speculative
#                                  window costs (BenchmarkWindows: a 1B
#                                  model's step over 1 … 9 rows; and with
#                                  attention split over blocks or not,
#                                  after 64 and 512 positions) and, where
#                                  Nsight Compute (ncu) is installed, each
#                                  kernel's time in a step of 1 and 8 rows
#   scripts/gpu-check.sh --all     on the GPU machine: the checks, then
#                                  --profile, then --spec, in one call
#                                  (about three minutes on an H200)
#   scripts/gpu-check.sh --spec    on the GPU machine, after the checks:
#                                  make bench-spec on the GPU (speculative
#                                  decoding's speedups, issue 21), with the
#                                  built-in model's drafts that --build copies
#                                  into .gpucheck/models
#
# With the device tool: build here, then
#   run(command="bash scripts/gpu-check.sh --all", carry=[".gpucheck"], timeout_s=400)
# and for make bench-spec's F16 cases, first (it starts the machine; the
# F16 stays there while the machine is warm, for the second call):
#   run(command="ls -l .gpucheck-f16", carry=[".gpucheck-f16"], timeout_s=60)
# On an H200 the checks took about a minute (limits: tests 200 s, bench
# 280 s), --profile about one and a half, --spec about 15 s.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=$root/.gpucheck/cuda.test
specbin=$root/.gpucheck/spec.test

# build makes the test binaries, and copies the built-in model's trained
# draft (a make bench-spec draft; the Q8_0 is in models/) from
# MESHNODE_MODELS (default ../shared/models), where it is, and the
# built-in model's F16 into .gpucheck-f16/ (git-ignored). The device tool
# carries at most 64 MiB a call: the tracked tree and .gpucheck/ take
# about 51 of them and the F16 is 28.5 MB (25 compressed), so the F16
# travels in a call of its own and stays on the warm machine (see the
# usage above). Without it the F16 cases skip on the GPU machine and the
# 1B-shaped models are inflated from the built-in Q8_0 there.
build() {
	mkdir -p .gpucheck/models .gpucheck-f16
	rm -f .gpucheck/models/meshnode-fortunes-f16.gguf
	CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$bin" ./cuda || return 1
	CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$specbin" ./gguf/spec || return 1
	models=${MESHNODE_MODELS:-$root/../shared/models}
	for f in meshnode-fortunes-draft-q8_0.gguf; do
		if [ -f "$models/$f" ]; then cp -f "$models/$f" .gpucheck/models/; else echo "gpu-check: no $models/$f: bench-spec's cases with it will skip"; fi
	done
	if [ -f "$models/meshnode-fortunes-f16.gguf" ]; then
		cp -f "$models/meshnode-fortunes-f16.gguf" .gpucheck-f16/
	else
		echo "gpu-check: no $models/meshnode-fortunes-f16.gguf: bench-spec's F16 cases will skip"
	fi
}

# models links into .gpucheck/models what bench-spec's F16 cases read
# beside the F16, where a call carried it (.gpucheck-f16): the F16 and
# the built-in Q8_0 (their Q8_0 draft), and prints the groups of cases
# to run, comma separated, each NAME:LIMIT (BENCH_CASE and seconds).
models() {
	f16=$root/.gpucheck-f16/meshnode-fortunes-f16.gguf
	groups="fortunes Q8_0:60,fortunes-1B:300"
	if [ -f "$f16" ]; then
		ln -sf "$f16" "$root/.gpucheck/models/"
		ln -sf "$root/models/meshnode-fortunes-q8_0.gguf" "$root/.gpucheck/models/"
		groups="fortunes F16:150,$groups"
	else
		rm -f "$root/.gpucheck/models/meshnode-fortunes-f16.gguf"
		echo "gpu-check: no .gpucheck-f16 here: the F16 cases skip (carry it first; see the usage)" >&2
	fi
	echo "$groups"
}

# ready builds the binaries where Go is, and exits unless the test binary
# $1 is there.
ready() {
	if command -v go >/dev/null 2>&1; then
		build || exit 1
	fi
	if [ ! -x "$1" ]; then
		echo "gpu-check: no Go here and no $1: run scripts/gpu-check.sh --build where Go is, and carry .gpucheck" >&2
		exit 2
	fi
}

# spec runs make bench-spec's binary on the GPU, one group of cases at a
# time (a group cut short by its timeout leaves the others' tables), and
# prints the tables. Adaptive windows only (BENCH_WINDOWS=0: what the
# engine does) unless BENCH_WINDOWS says otherwise.
spec() {
	OUT=${OUT:-$(mktemp -d)}
	mkdir -p "$OUT"
	cd "$root/gguf/spec" # the bench reads ../../models
	rc=0
	: >"$OUT/spec-summary.txt"
	IFS=, read -r -a groups <<<"$(models)"
	for group in "${groups[@]}"; do
		name=${group%:*} limit=${group##*:}
		log="$OUT/bench-spec-$(echo "$name" | tr ' ' '-').log"
		start=$(date +%s)
		MESHNODE_BENCH_SPEC=1 BENCH_BACKEND=cuda MESHNODE_MODELS=$root/.gpucheck/models BENCH_CASE="$name" \
			BENCH_REPS=${BENCH_REPS:-2} BENCH_WINDOWS=${BENCH_WINDOWS:-0} \
			timeout "$limit" "$specbin" -test.run '^$' -test.bench '^BenchmarkSpeculative$' -test.benchtime 1x -test.v \
			-test.timeout "$((limit - 10))s" >"$log" 2>&1
		code=$?
		[ $code -ne 0 ] && rc=$code
		{
			echo "== make bench-spec on the GPU, BENCH_CASE=\"$name\": exit $code, $(($(date +%s) - start)) s"
			grep -E '^backend:|^ *case |adaptive|fixed|SKIP|skipped|BENCH_BACKEND|FAIL|panic' "$log"
			echo
		} | tee -a "$OUT/spec-summary.txt"
		grep -q -- '--- SKIP' "$log" && rc=1
	done
	return $rc
}

# profile prints BenchmarkWindows' table and, where Nsight Compute (ncu)
# is, each kernel's time in a one-row and an eight-row step of the same
# model (scripts/ncu-steps.py): each kernel run alone with cold caches,
# the clocks left as they are, so the sum exceeds a graph's step but the
# kernels rank as they cost. (Nsight Systems would time them in the
# stream; the nsys that Nsight Compute ships on the device lacks its
# importer, so ncu it is.) About a minute on an H200.
profile() {
	OUT=${OUT:-$(mktemp -d)}
	mkdir -p "$OUT"
	cd "$root/cuda" # the bench reads ../models
	MESHNODE_BENCH_CUDA=1 BENCH_STEPS=${BENCH_STEPS:-200} timeout 150 "$bin" -test.run '^$' -test.bench '^BenchmarkWindows$' -test.benchtime 1x \
		-test.v -test.timeout 140s >"$OUT/windows.log" 2>&1
	rc=$?
	{
		echo "== BenchmarkWindows: exit $rc"
		grep -E '^device:|^ *rows|^ +[0-9]+ +[0-9]|^stats:|SKIP|FAIL|panic' "$OUT/windows.log"
	} | tee "$OUT/profile-summary.txt"
	# Attention split over blocks against one kernel (Options.
	# AttendSplitKeys): every step split after the short prompt, and a
	# 512-token prompt split (the default past 256 keys) and not.
	for run in "64 1" "512 0" "512 -1"; do
		set -- $run
		MESHNODE_BENCH_CUDA=1 BENCH_STEPS=${BENCH_STEPS:-200} BENCH_ROWS=1,2,4,8 BENCH_PROMPT=$1 BENCH_ATT_SPLIT=$2 timeout 100 "$bin" \
			-test.run '^$' -test.bench '^BenchmarkWindows$' -test.benchtime 1x -test.v -test.timeout 90s >"$OUT/windows-$1-$2.log" 2>&1 || rc=1
		grep -E '^device:|^ +[0-9]+ +[0-9]|SKIP|FAIL|panic' "$OUT/windows-$1-$2.log" | tee -a "$OUT/profile-summary.txt"
	done
	ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
	if [ -z "$ncu" ]; then
		echo "no ncu here: the per-kernel profile needs Nsight Compute" | tee -a "$OUT/profile-summary.txt"
		return $rc
	fi
	# The prompt, then four one-row and four eight-row steps (BENCH_STEPS=1
	# after three to warm up), about 2,100 kernels.
	MESHNODE_BENCH_CUDA=1 BENCH_ROWS=1,8 BENCH_STEPS=1 timeout 240 "$ncu" --clock-control none --graph-profiling node \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --log-file "$OUT/ncu.csv" \
		"$bin" -test.run '^$' -test.bench '^BenchmarkWindows$' -test.benchtime 1x >"$OUT/ncu.log" 2>&1 || rc=1
	python3 "$root/scripts/ncu-steps.py" "$OUT/ncu.csv" 2>&1 | tee -a "$OUT/profile-summary.txt"
	return $rc
}

case "${1:-}" in
--profile)
	ready "$bin"
	profile
	exit
	;;
--build)
	build && ls -l .gpucheck .gpucheck/models
	exit
	;;
--stand-in)
	export MESHNODE_CUDA_LIBRARY=stand-in BENCH_1B=0
	export BENCH_FIXTURE_PP=${BENCH_FIXTURE_PP:-8} BENCH_FIXTURE_TG=${BENCH_FIXTURE_TG:-4} GPU_TESTS_LIMIT=${GPU_TESTS_LIMIT:-1200}
	;;
--spec)
	ready "$specbin"
	spec
	exit
	;;
--all) all=1 ;;
"") ;;
*)
	echo "usage: $0 [--build | --stand-in | --spec | --profile | --all]" >&2
	exit 2
	;;
esac
ready "$bin"

OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
echo "gpu-check: logs in $OUT"
{
	uname -a
	nvidia-smi 2>&1 || echo "nvidia-smi failed"
	ldconfig -p 2>/dev/null | grep -E 'libcuda\.so' || echo "libcuda.so not in the loader cache"
} >"$OUT/machine.txt"

cd "$root/cuda" # the tests read ../models
start=$(date +%s)
# The tests' limit: 200 s on a GPU; the stand-in runs the kernels on the
# CPU, many times slower (GPU_TESTS_LIMIT).
limit=${GPU_TESTS_LIMIT:-200}
timeout "$limit" "$bin" -test.run 'GPU' -test.v -test.timeout "$((limit - 10))s" >"$OUT/gpu-tests.log" 2>&1
tests=$?
mid=$(date +%s)
MESHNODE_BENCH_CUDA=1 timeout 280 "$bin" -test.run '^$' -test.bench '^BenchmarkCUDA$' -test.benchtime 1x -test.v \
	-test.timeout 270s >"$OUT/bench.log" 2>&1
bench=$?
end=$(date +%s)
# A test that skipped found no device: on the machine this is for, that is
# a failed check, not a pass.
skipped=0
if grep -qE '^ *--- SKIP' "$OUT/gpu-tests.log" "$OUT/bench.log"; then skipped=1; fi

{
	echo "== machine"
	grep -m1 -E 'NVIDIA|Driver Version' "$OUT/machine.txt" || true
	echo "driver library: ${MESHNODE_CUDA_LIBRARY:-libcuda.so.1}"
	echo
	echo "== GPU tests: exit $tests, $((mid - start)) s"
	awk '/^(    )*--- (PASS|FAIL|SKIP)/ { printf "%-40s %-5s %s\n", $3, $2, $4 }' "$OUT/gpu-tests.log"
	grep -E 'device:|worst relative error|max \|Δlogit\||argmax decode:|stats:|no CUDA device|panic|FAIL' "$OUT/gpu-tests.log" | sed 's/^ *//' | sort | uniq -c | sort -rn | head -40
	echo
	echo "== make bench-cuda: exit $bench, $((end - mid)) s"
	sed -n '/^device:/,/^goos:/p' "$OUT/bench.log" | grep -v '^goos:'
	grep -E 'Benchmark|SKIP|FAIL|panic' "$OUT/bench.log" || true
	if [ $skipped -eq 1 ]; then
		echo
		echo "SKIPPED: some checks found no CUDA device (see the logs); nothing was checked on a GPU"
	fi
} | tee "$OUT/summary.txt"

ok=0
[ $tests -eq 0 ] && [ $bench -eq 0 ] && [ $skipped -eq 0 ] || ok=1
if [ "${all:-0}" = 1 ]; then
	# Each in a subshell: they change directory. The binaries are the
	# ones ready made above (build makes both).
	(profile) || ok=1
	(spec) || ok=1
fi
exit $ok
