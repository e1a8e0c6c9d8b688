package hw

import (
	"fmt"
	"strings"
)

// Domain is the set of parts of the machine an energy figure covers. A
// figure may be graded as a hardware reading only when its counters cover
// every part the request used (mesh/1 §3.3: mesh/1 has no coverage field,
// so a partial figure is never HwShunt).
type Domain uint8

const (
	// DomainCPU is the CPU cores and their package (RAPL package, the
	// IOReport CPU rail).
	DomainCPU Domain = 1 << iota
	// DomainGPU is a GPU: a discrete card (NVML) or an SoC's integrated one.
	DomainGPU
	// DomainDRAM is system memory.
	DomainDRAM
	// DomainANE is Apple's Neural Engine.
	DomainANE
	// DomainModule is a whole module or board measured at its input (a
	// Jetson's VDD_IN shunt): it covers every other domain.
	DomainModule
)

var domainNames = []struct {
	d    Domain
	name string
}{
	{DomainModule, "module"},
	{DomainCPU, "cpu"},
	{DomainGPU, "gpu"},
	{DomainDRAM, "dram"},
	{DomainANE, "ane"},
}

// Covers reports whether a figure over d accounts for every part in need.
func (d Domain) Covers(need Domain) bool {
	if d&DomainModule != 0 {
		return true
	}
	return d&need == need
}

// String lists the parts joined by "+", e.g. "cpu+gpu"; the empty set is
// "none".
func (d Domain) String() string {
	if d == 0 {
		return "none"
	}
	var parts []string
	for _, n := range domainNames {
		if d&n.d != 0 {
			parts = append(parts, n.name)
			d &^= n.d
		}
	}
	if d != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint8(d)))
	}
	return strings.Join(parts, "+")
}

// ParseDomain is the inverse of [Domain.String].
func ParseDomain(s string) (Domain, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "none" || s == "" {
		return 0, nil
	}
	var d Domain
	for _, part := range strings.Split(s, "+") {
		found := false
		for _, n := range domainNames {
			if part == n.name {
				d |= n.d
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("hw: unknown energy domain %q (want cpu, gpu, dram, ane or module)", part)
		}
	}
	return d, nil
}

// MarshalText writes the domain as [Domain.String] does.
func (d Domain) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (d *Domain) UnmarshalText(b []byte) error {
	v, err := ParseDomain(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
