package train

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadYAML reads the YAML file at path into the bound struct (see DecodeYAML).
func (o *Options) LoadYAML(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return o.DecodeYAML(path, raw)
}

// DecodeYAML sets the options the YAML document in raw names; name labels errors.
// Keys are the option names: nested (drafter: {block-size: 8}) or dotted
// (drafter.block-size: 8). Values are parsed as flag values are: a fractional value
// for an integer option is an error, not a truncation. Every bad key or value is
// reported with the file, line and option name; an empty document changes nothing.
func (o *Options) DecodeYAML(name string, raw []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: more than one YAML document", name)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s line %d: want a mapping of option names to values", name, root.Line)
	}
	var errs []error
	o.decodeMapping(name, root, "", map[string]int{}, &errs)
	return errors.Join(errs...)
}

func (o *Options) decodeMapping(file string, m *yaml.Node, prefix string, seen map[string]int, errs *[]error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		key := prefix + k.Value
		at := fmt.Sprintf("%s line %d", file, k.Line)
		fail := func(format string, args ...any) {
			*errs = append(*errs, fmt.Errorf("%s: %s: %s", at, key, fmt.Sprintf(format, args...)))
		}
		if first, dup := seen[key]; dup {
			fail("given twice (first on line %d)", first)
			continue
		}
		seen[key] = k.Line
		if o.groups[key] {
			if v.Kind != yaml.MappingNode {
				if o.fs != nil && o.fs.Lookup(key) != nil {
					fail("is a group of options (give a mapping of its option names to values); --%s itself is a flag only (give it on the command line)", key)
				} else {
					fail("is a group of options: give a mapping of its option names to values")
				}
				continue
			}
			o.decodeMapping(file, v, key+".", seen, errs)
			continue
		}
		op, ok := o.byName[key]
		if !ok {
			fail("%s", o.unknown(key))
			continue
		}
		val, err := yamlValue(op.field.Type(), v)
		if err != nil {
			fail("%v", err)
			continue
		}
		op.field.Set(val)
		op.source, op.raw = at, yamlText(v)
	}
}

// unknown explains an unknown key, suggesting the option it resembles.
func (o *Options) unknown(key string) string {
	if op, ok := o.byName[strings.ReplaceAll(key, "_", "-")]; ok {
		return fmt.Sprintf("unknown option (did you mean %s? keys are spelled as the flags are)", op.name)
	}
	var only []string // flags of the command that are not options
	if o.fs != nil {
		o.fs.VisitAll(func(f *flag.Flag) {
			if _, ok := o.byName[f.Name]; !ok {
				only = append(only, "--"+f.Name)
			}
		})
	}
	if slices.Contains(only, "--"+key) {
		return fmt.Sprintf("not an option of the file: --%s is a flag only (give it on the command line)", key)
	}
	if len(only) > 0 {
		return "unknown option (keys are the flag names that --help lists, but for the flags only: " + strings.Join(only, ", ") + ")"
	}
	return "unknown option (keys are the flag names that --help lists)"
}

// yamlValue parses node as a value of type t: a scalar, or for a slice also a sequence.
func yamlValue(t reflect.Type, n *yaml.Node) (reflect.Value, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return reflect.Value{}, errors.New("needs a value")
		}
		return parseValue(t, n.Value)
	case yaml.SequenceNode:
		if t.Kind() != reflect.Slice {
			return reflect.Value{}, errors.New("takes one value, not a list")
		}
		sl := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				return reflect.Value{}, fmt.Errorf("line %d: a list element must be a single value", e.Line)
			}
			ev, err := parseValue(t.Elem(), e.Value)
			if err != nil {
				return reflect.Value{}, err
			}
			sl.Index(i).Set(ev)
		}
		return sl, nil
	}
	return reflect.Value{}, errors.New("takes a value, not a mapping")
}

// yamlText is a value node as written: a scalar, or a list joined by commas.
func yamlText(n *yaml.Node) string {
	if n.Kind != yaml.SequenceNode {
		return n.Value
	}
	parts := make([]string, len(n.Content))
	for i, e := range n.Content {
		parts[i] = e.Value
	}
	return strings.Join(parts, ",")
}
