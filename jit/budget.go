package jit

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// BudgetWarning reports a kernel family with more distinct kernels than the
// specialisation budget allows.
type BudgetWarning struct {
	Family  string
	Kernels int      // distinct keys of the family in this process
	Budget  int      // the budget
	Differ  []string // key parts that differ, each with its values, e.g. "params.seq_len: 1024, 2048, 4096"
}

func (w BudgetWarning) String() string {
	return fmt.Sprintf("kernel family %q has %d distinct kernels, over its budget of %d; differing: %s",
		w.Family, w.Kernels, w.Budget, strings.Join(w.Differ, "; "))
}

// variant is what the budget remembers of one key.
type variant struct {
	arch    string
	options []string
	params  map[string]string
	code    [8]byte // prefix of the code's SHA-256
}

type family struct {
	keys   map[Key]variant
	warned bool
}

type budget struct {
	limit int
	mu    sync.Mutex
	fams  map[string]*family
}

func (b *budget) init(limit int) { b.limit, b.fams = limit, map[string]*family{} }

// note records key of src and warns once when its family passes the limit.
func (b *budget) note(c *Cache, key Key, src Source) {
	b.mu.Lock()
	f := b.fams[src.Family]
	if f == nil {
		f = &family{keys: map[Key]variant{}}
		b.fams[src.Family] = f
	}
	if _, seen := f.keys[key]; !seen {
		h := sha256.Sum256([]byte(src.Code))
		v := variant{arch: src.Arch, options: src.Options, params: src.Params}
		copy(v.code[:], h[:8])
		f.keys[key] = v
	}
	var w *BudgetWarning
	if len(f.keys) > b.limit && !f.warned {
		f.warned = true
		w = &BudgetWarning{Family: src.Family, Kernels: len(f.keys), Budget: b.limit, Differ: differing(f.keys)}
	}
	b.mu.Unlock()
	if w == nil {
		return
	}
	c.cfg.Logger.Warn("jit: kernel family over its specialisation budget: specialise on structure, never on size; "+
		"make the differing values run-time arguments", "family", w.Family, "kernels", w.Kernels, "budget", w.Budget,
		"differing", strings.Join(w.Differ, "; "))
	if c.cfg.OnBudget != nil {
		c.cfg.OnBudget(*w)
	}
}

func (b *budget) counts() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int, len(b.fams))
	for name, f := range b.fams {
		out[name] = len(f.keys)
	}
	return out
}

// differing names the key parts that are not the same in every variant.
func differing(keys map[Key]variant) []string {
	var vs []variant
	for _, v := range keys {
		vs = append(vs, v)
	}
	var out []string
	values := func(get func(v variant) string) []string {
		set := map[string]bool{}
		for _, v := range vs {
			set[get(v)] = true
		}
		list := make([]string, 0, len(set))
		for s := range set {
			list = append(list, s)
		}
		sort.Strings(list)
		return list
	}
	add := func(part string, vals []string) {
		if len(vals) < 2 {
			return
		}
		const show = 6
		s := strings.Join(vals[:min(show, len(vals))], ", ")
		if len(vals) > show {
			s += fmt.Sprintf(", ... (%d values)", len(vals))
		}
		out = append(out, part+": "+s)
	}
	// params, by name
	names := map[string]bool{}
	for _, v := range vs {
		for k := range v.params {
			names[k] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		add("params."+k, values(func(v variant) string {
			if p, ok := v.params[k]; ok {
				return p
			}
			return "<unset>"
		}))
	}
	// options: those not present in every variant
	count := map[string]int{}
	for _, v := range vs {
		seen := map[string]bool{}
		for _, o := range v.options {
			if !seen[o] {
				seen[o] = true
				count[o]++
			}
		}
	}
	var partial []string
	for o, n := range count {
		if n < len(vs) {
			partial = append(partial, o)
		}
	}
	sort.Strings(partial)
	switch {
	case len(partial) > 0:
		list := strings.Join(partial[:min(len(partial), 6)], ", ")
		if len(partial) > 6 {
			list += fmt.Sprintf(", ... (%d options)", len(partial))
		}
		out = append(out, "options (not in every kernel): "+list)
	case len(values(func(v variant) string { return strings.Join(v.options, "\x00") })) > 1:
		out = append(out, "options: the same options in different orders")
	}
	add("arch", values(func(v variant) string { return v.arch }))
	codes := values(func(v variant) string { return fmt.Sprintf("%x", v.code) })
	if len(codes) > 1 {
		out = append(out, fmt.Sprintf("code: %d different sources", len(codes)))
	}
	return out
}
