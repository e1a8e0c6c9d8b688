package ggufengine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/metal"
)

// Backend names for Config.Backend.
const (
	// BackendAuto runs a model on the GPU where a GPU backend opens and
	// can run it — Metal on darwin/arm64, CUDA elsewhere — else on the
	// CPU.
	BackendAuto  = "auto"
	BackendCPU   = "cpu"
	BackendCUDA  = "cuda"
	BackendMetal = "metal"
)

// devicesOf says which devices a backend's serves run on. A GPU backend's
// host threads drive the device and hold the sampler, so the CPU is in
// it too. A backend this table does not know is taken to use anything
// (hw.AnyDevice), so that no counter covering less grades it.
func devicesOf(backend string) hw.Domain {
	switch backend {
	case BackendCPU:
		return hw.DomainCPU
	case BackendCUDA, BackendMetal:
		return hw.DomainCPU | hw.DomainGPU
	}
	return hw.AnyDevice
}

// cudaUnavailable and metalUnavailable say once per process why models
// stay on the CPU.
var cudaUnavailable, metalUnavailable sync.Once

// noGPULine is the one short line a machine without a usable NVIDIA GPU
// gets at every start (the whole reason goes to the debug log).
func noGPULine(err error) string {
	if errors.Is(err, driver.ErrNoLibrary) {
		return "no NVIDIA driver (libcuda.so.1): models run on the CPU"
	}
	return "no usable CUDA device: models run on the CPU"
}

// cudaOptions open the CUDA backend (tests point Library at a stand-in).
var cudaOptions cuda.Options

// cpuOptions open the CPU backend but for its threads, Config.Threads
// (tests shrink CacheBytes so that weights are read from memory).
var cpuOptions cpu.Options

// metalOptions open the Metal backend (tests give it the stand-in's
// device), and autoMetal makes auto try Metal rather than CUDA: on
// darwin/arm64, where Apple's GPUs are.
var (
	metalOptions metal.Options
	autoMetal    = runtime.GOOS == "darwin" && runtime.GOARCH == "arm64"
)

// loadOnBackend loads f's weights on the backend cfg.Backend names. Under
// BackendAuto it tries the GPU first (Metal on darwin/arm64, CUDA
// elsewhere) and falls back to the CPU, saying why: once per process when
// there is no usable GPU, per model when the GPU cannot run that model (a
// weight type without kernels, too little device memory, a file larger
// than Metal's working set). memory is the bytes the KV caches may come
// from: the device's when the model runs on it.
func loadOnBackend(f *gguf.File, cfg Config, log *slog.Logger) (be backend.Backend, m *model.Model, memory uint64, err error) {
	name := cfg.Backend
	if name == "" {
		name = BackendAuto
	}
	onCPU := func() (backend.Backend, *model.Model, uint64, error) {
		opt := cpuOptions
		opt.Threads = cfg.Threads
		be := cpu.New(opt)
		m, err := model.Load(f, be)
		if err != nil {
			be.Close()
			return nil, nil, 0, err
		}
		return be, m, cfg.MemoryBytes, nil
	}
	switch name {
	case BackendCPU:
		return onCPU()
	case BackendMetal:
		return loadOnMetal(f, cfg, log, false, onCPU)
	case BackendAuto:
		if autoMetal {
			return loadOnMetal(f, cfg, log, true, onCPU)
		}
	case BackendCUDA:
	default:
		return nil, nil, 0, fmt.Errorf("ggufengine: backend %q (want auto, cpu, cuda or metal)", name)
	}

	opt := cudaOptions
	opt.Log = log
	g, err := cuda.New(opt)
	if err != nil {
		if name == BackendCUDA {
			return nil, nil, 0, err
		}
		if errors.Is(err, cuda.ErrNoDevice) {
			cudaUnavailable.Do(func() { log.Info(noGPULine(err)); log.Debug("why there is no CUDA device", "err", err) })
		} else {
			log.Warn("the CUDA backend failed to start; the model runs on the CPU", "err", err)
		}
		return onCPU()
	}
	if _, err := g.MapHost(f.Bytes()); err != nil {
		log.Info("weights are copied to the GPU", "reason", err)
	}
	m, err = model.Load(f, g)
	if err != nil {
		g.Close()
		if name == BackendCUDA {
			return nil, nil, 0, err
		}
		log.Warn("the GPU cannot run this model; it runs on the CPU", "err", err)
		return onCPU()
	}
	memory = g.Info().MemoryBytes
	if cfg.MemoryBytes != 0 {
		memory = min(memory, cfg.MemoryBytes)
	}
	return g, m, memory, nil
}

// loadOnMetal loads f on the Metal backend: the file mapped as no-copy
// buffers, the weights read in place. With auto, what stops it sends the
// model to the CPU (onCPU), said once per process when there is no
// device, per model otherwise; without, it is the error.
func loadOnMetal(f *gguf.File, cfg Config, log *slog.Logger, auto bool,
	onCPU func() (backend.Backend, *model.Model, uint64, error)) (backend.Backend, *model.Model, uint64, error) {
	opt := metalOptions
	opt.Log = log
	g, err := metal.New(opt)
	if err != nil {
		if !auto {
			return nil, nil, 0, err
		}
		if errors.Is(err, metal.ErrNoDevice) {
			metalUnavailable.Do(func() { log.Info("models run on the CPU", "reason", err) })
		} else {
			log.Warn("the Metal backend failed to start; the model runs on the CPU", "err", err)
		}
		return onCPU()
	}
	info := g.Info()
	if size := uint64(len(f.Bytes())); size > info.WorkingSet {
		g.Close()
		err := fmt.Errorf("metal: the model's %d MiB exceed %s's working set of %d MiB", size>>20, info.Name, info.WorkingSet>>20)
		if !auto {
			return nil, nil, 0, err
		}
		log.Warn("the GPU cannot hold this model; it runs on the CPU", "err", err)
		return onCPU()
	}
	if err := g.MapFile(f.Bytes(), largestTensor(f)); err != nil {
		log.Info("weights are copied to GPU buffers", "reason", err)
	}
	m, err := model.Load(f, g)
	if err != nil {
		g.Close()
		if !auto {
			return nil, nil, 0, err
		}
		log.Warn("the GPU cannot run this model; it runs on the CPU", "err", err)
		return onCPU()
	}
	memory := info.WorkingSet
	if cfg.MemoryBytes != 0 {
		memory = min(memory, cfg.MemoryBytes)
	}
	return g, m, memory, nil
}

// largestTensor is the bytes of f's largest tensor: the overlap MapFile
// gives views of a file larger than one buffer.
func largestTensor(f *gguf.File) int {
	n := 0
	for _, t := range f.Tensors {
		if b, err := f.TensorData(t); err == nil {
			n = max(n, len(b))
		}
	}
	return n
}
