// Package jinja is the Jinja engine that renders a model's chat template.
//
// It is github.com/ardanlabs/jinja v1.8.0 (Apache License 2.0, LICENSE
// here; copyright 2026 Ardan Labs), carried in this tree so that a render
// is bounded: a chat template comes from a GGUF file, which is outside
// input, and the engine as published bounds neither the memory nor the
// time nor the stack a template may spend. limits.go says what a render
// may spend and how it stops; the rest is the engine as published, with
// its spending sites charged to that budget.
package jinja
