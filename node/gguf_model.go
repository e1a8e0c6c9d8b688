package node

import (
	"errors"
	"log/slog"
)

// errNoGGUFEngine is returned until the GGUF engine adapter is wired in
// (node/engine/ggufengine, the CPU-engine issue).
var errNoGGUFEngine = errors.New("serving GGUF models needs the GGUF engine adapter, which is not wired into the node yet")

func openGGUF(s modelSpec, log *slog.Logger) (localModel, error) {
	return nil, errNoGGUFEngine
}
