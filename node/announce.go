package node

import (
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"google.golang.org/protobuf/proto"
)

// announcement is the self entry this node gossips: a HOST with its API
// port, the models it serves (hosted: routable now) and has on disk with
// their GGUF metadata and sizes, its hardware, and that it accepts work.
// The mesh adds identity, version, addresses and latency.
func (n *Node) announcement(httpPort uint32) *nodev1.PeerAnnouncement {
	a := &nodev1.PeerAnnouncement{
		Role:                    nodev1.NodeRole_HOST,
		HttpPort:                proto.Uint32(httpPort),
		HostedModelsKnown:       proto.Bool(true),
		InferenceAdmissionState: nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ACCEPTING.Enum(),
		AvailableModelSizes:     map[string]uint64{},
	}
	seen := map[string]bool{}
	for _, in := range n.models.all() {
		name := in.m.Name()
		// A split model is routable only while its stages are loaded:
		// its route is withdrawn while it is placed again.
		if sm := n.splitModel(name); sm == nil || sm.Serving() {
			if a.PrimaryServing == nil {
				a.PrimaryServing = proto.String(name)
			}
			a.HostedModels = append(a.HostedModels, name)
			a.ServingModels = append(a.ServingModels, name)
		}
		if f := in.m.Facts(); f != nil {
			a.AvailableModelMetadata = append(a.AvailableModelMetadata, compactMetadata(name, f))
			a.AvailableModelSizes[name] = uint64(in.m.Size())
			a.AvailableModels = append(a.AvailableModels, name)
			seen[name] = true
		}
	}
	for _, e := range n.inventorySnapshot() {
		if seen[e.CanonicalModelRef] {
			continue
		}
		a.AvailableModels = append(a.AvailableModels, e.CanonicalModelRef)
		a.AvailableModelMetadata = append(a.AvailableModelMetadata, e.Metadata)
		a.AvailableModelSizes[e.CanonicalModelRef] = e.TotalSizeBytes
	}
	a.MeshnodeModelLoad = n.modelLoads(a.HostedModels)
	n.mu.Lock()
	a.OwnerAttestation = n.ownership
	srv := n.stageSrv
	n.mu.Unlock()
	if srv != nil {
		a.Subprotocols = append(a.Subprotocols, n.stageAdvertisement())
	}
	if f := n.hardware; f != nil {
		a.Hardware = hardwareInfo(f)
		// The pre-v0.60 fields, which older peers still read.
		a.Hostname = proto.String(f.Hostname)
		a.IsSoc = proto.Bool(f.IsSoC)
		a.VramBytes = vram(f)
	}
	return a
}

// vram is the GPU memory of every GPU in f, in bytes (0 when unknown):
// the vram capability hint of gossip and mDNS.
func vram(f *hw.Facts) uint64 {
	var total uint64
	if f != nil {
		for _, g := range f.GPUs {
			total += g.VRAMBytes
		}
	}
	return total
}

// compactMetadata is gguf.Facts in its wire form.
func compactMetadata(key string, f *gguf.Facts) *nodev1.CompactModelMetadata {
	md := &nodev1.CompactModelMetadata{
		ModelKey:           key,
		ContextLength:      f.ContextLength,
		VocabSize:          f.VocabSize,
		EmbeddingSize:      f.EmbeddingSize,
		HeadCount:          f.HeadCount,
		LayerCount:         f.LayerCount,
		FeedForwardLength:  f.FeedForwardLength,
		KeyLength:          f.KeyLength,
		ValueLength:        f.ValueLength,
		Architecture:       f.Architecture,
		TokenizerModelName: f.TokenizerModel,
		RopeScale:          f.RopeScale,
		RopeFreqBase:       f.RopeFreqBase,
		IsMoe:              f.IsMoE,
		ExpertCount:        f.ExpertCount,
		UsedExpertCount:    f.UsedExpertCount,
		QuantizationType:   f.QuantizationType,
		KvHeadCount:        f.KVHeadCount,
	}
	if f.ParameterSize != "" {
		md.ParameterSize = proto.String(f.ParameterSize)
	}
	for _, t := range f.SpecialTokens {
		md.SpecialTokens = append(md.SpecialTokens, &nodev1.SpecialToken{Name: t.Name, TokenId: t.ID})
	}
	return md
}

// hardwareInfo is hw.Facts in its wire form (HardwareInfo, since v0.60,
// which carries the per-GPU figures as decimal strings).
func hardwareInfo(f *hw.Facts) *nodev1.HardwareInfo {
	h := &nodev1.HardwareInfo{IsSoc: proto.Bool(f.IsSoC)}
	if f.Hostname != "" {
		h.Hostname = proto.String(f.Hostname)
	}
	if f.Memory.TotalBytes > 0 {
		h.Memory = &nodev1.MemoryInfo{
			TotalBytes:     proto.Uint64(f.Memory.TotalBytes),
			SystemRamBytes: proto.Uint64(f.Memory.TotalBytes),
		}
		if f.Memory.AvailableBytes > 0 {
			h.Memory.UsableBytes = proto.Uint64(f.Memory.AvailableBytes)
		}
	}
	for _, g := range f.GPUs {
		gi := &nodev1.GpuInfo{Name: proto.String(g.Name), VramBytes: proto.String(strconv.FormatUint(g.VRAMBytes, 10))}
		if g.ReservedBytes > 0 {
			gi.ReservedBytes = proto.String(strconv.FormatUint(g.ReservedBytes, 10))
		}
		if g.MemBandwidthGBps > 0 {
			gi.MemBandwidthGbps = proto.String(formatFloat(g.MemBandwidthGBps))
		}
		if g.TFLOPSFP32 > 0 {
			gi.ComputeTflopsFp32 = proto.String(formatFloat(g.TFLOPSFP32))
		}
		if g.TFLOPSFP16 > 0 {
			gi.ComputeTflopsFp16 = proto.String(formatFloat(g.TFLOPSFP16))
		}
		h.Gpus = append(h.Gpus, gi)
	}
	return h
}

func formatFloat(v float64) string {
	return strings.TrimRight(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
}
