package train

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Options binds the fields of a configuration struct to command-line flags and to
// the keys of a YAML file, with one name for both: the flag --drafter.block-size is
// the YAML key block-size inside drafter (or the key drafter.block-size). Values are
// layered: the struct's values are the defaults (shown by --help), DecodeYAML
// overrides them, and Apply writes the flags the user set over both. Validate then
// checks every option against its range and names it where the user gave it.
//
// Struct tags: `yaml:"name"` (the option name; a nested struct adds "name." in front
// of its fields, ",inline" adds nothing), `help:"..."`, and for every numeric option
// `range:"..."` (">=1", ">0", "[0,1)", "[0,1]"; a slice's range applies to each
// element); `choice:"a,b,c"` restricts a string. Supported field types: string,
// bool, ints, uints, floats, time.Duration and slices of string, int or float64.
type Options struct {
	fs     *flag.FlagSet
	list   []*option // in declaration order
	byName map[string]*option
	groups map[string]bool // names of nested structs
}

type option struct {
	name    string
	help    string
	field   reflect.Value
	rng     *valueRange
	choices []string
	def     string
	flagged *reflect.Value // parsed flag value, nil until given
	flagRaw string         // the flag's value as typed
	raw     string         // the value as the user typed it ("" for a default)
	source  string         // where the value was given: "" (default), "--name" or "FILE line N"
}

// BindOptions registers a flag on fs for every option of *cfg (see Options) and
// returns the binding. A field of an unsupported type, or a numeric field without a
// range tag, panics: every number a user can give is checked.
func BindOptions(fs *flag.FlagSet, cfg any) *Options {
	o := &Options{fs: fs, byName: map[string]*option{}, groups: map[string]bool{}}
	o.list = collect(cfg, o.groups)
	for _, op := range o.list {
		o.byName[op.name] = op
		if fs != nil {
			fs.Var((*fieldFlag)(op), op.name, op.usage())
		}
	}
	return o
}

// collect returns the options of *cfg in declaration order; groups, when not nil,
// receives the names of nested structs.
func collect(cfg any, groups map[string]bool) []*option {
	rv := reflect.ValueOf(cfg)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("train: options need a pointer to a struct, got %T", cfg))
	}
	var list []*option
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			tag, ok := sf.Tag.Lookup("yaml")
			if !sf.IsExported() || !ok || tag == "-" {
				continue
			}
			key, opts, _ := strings.Cut(tag, ",")
			fv := v.Field(i)
			if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[time.Duration]() {
				if strings.Contains(opts, "inline") {
					walk(fv, prefix)
				} else {
					if groups != nil {
						groups[prefix+key] = true
					}
					walk(fv, prefix+key+".")
				}
				continue
			}
			list = append(list, newOption(prefix+key, sf, fv))
		}
	}
	walk(rv.Elem(), "")
	return list
}

func newOption(name string, sf reflect.StructField, fv reflect.Value) *option {
	if !supported(fv.Type()) {
		panic(fmt.Sprintf("train: option %s: unsupported type %s", name, sf.Type))
	}
	op := &option{name: name, help: sf.Tag.Get("help"), field: fv, def: formatValue(fv)}
	if c := sf.Tag.Get("choice"); c != "" {
		op.choices = strings.Split(c, ",")
	}
	if r, ok := sf.Tag.Lookup("range"); ok {
		vr, err := parseRange(r)
		if err != nil {
			panic(fmt.Sprintf("train: option %s: range tag: %v", name, err))
		}
		op.rng = vr
	} else if numeric(fv.Type()) {
		panic(fmt.Sprintf("train: numeric option %s has no range tag", name))
	}
	return op
}

// Apply writes the values of the flags the user set into the struct.
func (o *Options) Apply() {
	o.fs.Visit(func(f *flag.Flag) {
		if op, ok := o.byName[f.Name]; ok && op.flagged != nil {
			op.field.Set(*op.flagged)
			op.source, op.raw = "--"+op.name, op.flagRaw
		}
	})
}

// Validate checks every option against its range or choices. Each error names the
// option as the user gave it: "--data.batch-size 0: ..." for a flag, "FILE line 3:
// data.batch-size: ..." for a YAML key.
func (o *Options) Validate() error { return checkAll(o.list) }

// Names returns the option names in declaration order.
func (o *Options) Names() []string {
	names := make([]string, len(o.list))
	for i, op := range o.list {
		names[i] = op.name
	}
	return names
}

// Given reports whether the option was set by a flag or by the YAML file.
func (o *Options) Given(name string) bool {
	op, ok := o.byName[name]
	return ok && op.source != ""
}

// Source returns how the user gave the option, for messages: "--name" for a flag,
// "FILE line N: name" for a YAML key, "name" when it kept its default.
func (o *Options) Source(name string) string {
	if op, ok := o.byName[name]; ok {
		return op.label()
	}
	return name
}

func checkAll(list []*option) error {
	var errs []error
	for _, op := range list {
		if err := op.check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (op *option) label() string {
	switch {
	case op.source == "":
		return op.name
	case strings.HasPrefix(op.source, "--"):
		return op.source
	default:
		return op.source + ": " + op.name
	}
}

// check validates the option's current value.
func (op *option) check() error {
	v := op.field
	bad := func(why string) error {
		if op.source == "" {
			return fmt.Errorf("%s = %s: %s", op.name, formatValue(v), why)
		}
		return fmt.Errorf("%s %s: %s", op.label(), op.raw, why)
	}
	if op.choices != nil {
		s := v.String()
		for _, c := range op.choices {
			if s == c {
				return nil
			}
		}
		return bad("must be " + op.describe())
	}
	if op.rng == nil {
		return nil
	}
	vals := []reflect.Value{v}
	if v.Kind() == reflect.Slice {
		vals = vals[:0]
		for i := range v.Len() {
			vals = append(vals, v.Index(i))
		}
	}
	for _, e := range vals {
		if !op.rng.contains(asFloat(e)) {
			return bad("must be " + op.describe())
		}
	}
	return nil
}

// typeName is the word --help shows for the option's type.
func (op *option) typeName() string {
	t := op.field.Type()
	if t == reflect.TypeFor[time.Duration]() {
		return "duration"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "int"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "uint"
	case reflect.Float32, reflect.Float64:
		return "float"
	case reflect.Slice:
		return map[reflect.Kind]string{reflect.String: "strings", reflect.Int: "ints", reflect.Float64: "floats"}[t.Elem().Kind()]
	}
	return "value"
}

// describe says which values the option takes: "an int >= 1", "one of F32, BF16".
func (op *option) describe() string {
	switch {
	case op.choices != nil:
		return "one of " + strings.Join(op.choices, ", ")
	case op.rng != nil && op.field.Kind() == reflect.Slice:
		return "a comma-separated list of " + op.typeName() + ", each " + op.rng.String()
	case op.rng != nil && op.typeName() == "float":
		return "a finite float " + op.rng.String()
	case op.rng != nil && op.typeName() == "int":
		return "an int " + op.rng.String()
	case op.rng != nil:
		return "a " + op.typeName() + " " + op.rng.String()
	}
	return "a " + op.typeName()
}

// allowed is the range column of --help and the docs table ("" when any value goes).
func (op *option) allowed() string {
	switch {
	case op.choices != nil:
		return strings.Join(op.choices, ", ")
	case op.rng != nil:
		return op.rng.String()
	}
	return ""
}

// usage is the flag's help text: the type in back quotes (flag.PrintDefaults shows
// it after the flag's name) and the allowed values.
func (op *option) usage() string {
	if op.field.Kind() == reflect.Bool {
		return op.help
	}
	if op.choices != nil {
		return fmt.Sprintf("%s (`%s`: %s)", op.help, op.typeName(), op.describe())
	}
	if a := op.allowed(); a != "" {
		return fmt.Sprintf("%s (`%s` %s)", op.help, op.typeName(), a)
	}
	return fmt.Sprintf("%s (`%s`)", op.help, op.typeName())
}

// fieldFlag is an option seen as a flag.Value.
type fieldFlag option

func (f *fieldFlag) String() string {
	if f == nil || !f.field.IsValid() {
		return ""
	}
	if f.flagged != nil {
		return formatValue(*f.flagged)
	}
	return formatValue(f.field)
}

func (f *fieldFlag) Set(s string) error {
	v, err := parseValue(f.field.Type(), s)
	if err != nil {
		return fmt.Errorf("%w: must be %s", err, (*option)(f).describe())
	}
	f.flagged, f.flagRaw = &v, s
	return nil
}

// IsBoolFlag lets a bool option be given as a bare --name.
func (f *fieldFlag) IsBoolFlag() bool { return f.field.Kind() == reflect.Bool }
