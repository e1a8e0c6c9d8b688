//go:build darwin || freebsd || linux || netbsd

package nvml

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// DefaultPath is the NVML library the driver installs.
const DefaultPath = "libnvidia-ml.so.1"

// Load opens the NVML shared library at path (DefaultPath when empty) and
// binds its functions. The library stays loaded for the process's life.
func Load(path string) (*Lib, error) {
	if path == "" {
		path = DefaultPath
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("nvml: open %s: %w", path, err)
	}
	var lib Lib
	required := []struct {
		fn   any
		name string
	}{
		{&lib.Init, "nvmlInit_v2"},
		{&lib.Shutdown, "nvmlShutdown"},
		{&lib.DeviceGetCount, "nvmlDeviceGetCount_v2"},
		{&lib.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2"},
		{&lib.DeviceGetName, "nvmlDeviceGetName"},
		{&lib.DeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo"},
		{&lib.DeviceGetTotalEnergyConsumption, "nvmlDeviceGetTotalEnergyConsumption"},
	}
	for _, f := range required {
		sym, err := purego.Dlsym(h, f.name)
		if err != nil {
			return nil, fmt.Errorf("nvml: %s lacks %s: %w", path, f.name, err)
		}
		purego.RegisterFunc(f.fn, sym)
	}
	optional := []struct {
		fn   any
		name string
	}{
		{&lib.DeviceGetMemoryInfoV2, "nvmlDeviceGetMemoryInfo_v2"},
		{&lib.DeviceGetArchitecture, "nvmlDeviceGetArchitecture"},
	}
	for _, f := range optional {
		if sym, err := purego.Dlsym(h, f.name); err == nil {
			purego.RegisterFunc(f.fn, sym)
		}
	}
	return &lib, nil
}
