package train

import (
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Flags binds command-line flags to the fields of a configuration struct. Flags are
// registered with the struct's current values as defaults (for -help); Apply writes
// into the struct only the flags the user set, so a caller can fill the struct from
// defaults, then a YAML file, then Apply: flags override the file, which overrides
// the defaults.
type Flags struct {
	fs     *flag.FlagSet
	fields map[string]*fieldFlag
}

type fieldFlag struct {
	field reflect.Value
	set   *reflect.Value // parsed value, nil until the flag is given
}

// BindFlags registers a flag on fs for every exported field of *cfg that has a yaml
// tag: the flag name is the key with '_' replaced by '-', nested structs add
// "<key>." in front (",inline" ones add nothing), help comes from the `help` tag.
// Supported field types: string, bool, ints, uints, floats, time.Duration and slices
// of string, int or float64 (comma separated). Other types panic.
func BindFlags(fs *flag.FlagSet, cfg any) *Flags {
	rv := reflect.ValueOf(cfg)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("train: BindFlags needs a pointer to a struct, got %T", cfg))
	}
	b := &Flags{fs: fs, fields: map[string]*fieldFlag{}}
	b.bind(rv.Elem(), "")
	return b
}

func (b *Flags) bind(v reflect.Value, prefix string) {
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
				b.bind(fv, prefix)
			} else {
				b.bind(fv, prefix+strings.ReplaceAll(key, "_", "-")+".")
			}
			continue
		}
		if key == "" {
			key = strings.ToLower(sf.Name)
		}
		name := prefix + strings.ReplaceAll(key, "_", "-")
		ff := &fieldFlag{field: fv}
		if !supported(fv.Type()) {
			panic(fmt.Sprintf("train: BindFlags: field %s has unsupported type %s", sf.Name, sf.Type))
		}
		b.fields[name] = ff
		b.fs.Var(ff, name, sf.Tag.Get("help"))
	}
}

// Apply writes the values of the flags the user set into the struct.
func (b *Flags) Apply() {
	b.fs.Visit(func(f *flag.Flag) {
		if ff, ok := b.fields[f.Name]; ok && ff.set != nil {
			ff.field.Set(*ff.set)
		}
	})
}

func (f *fieldFlag) String() string {
	if f == nil || !f.field.IsValid() {
		return ""
	}
	return formatValue(f.field)
}

func (f *fieldFlag) Set(s string) error {
	v, err := parseValue(f.field.Type(), s)
	if err != nil {
		return err
	}
	f.set = &v
	return nil
}

// IsBoolFlag lets a bool field be given as a bare -name.
func (f *fieldFlag) IsBoolFlag() bool { return f.field.Kind() == reflect.Bool }

func supported(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String, reflect.Int, reflect.Float64:
			return true
		}
	}
	return false
}

func parseValue(t reflect.Type, s string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	if t == reflect.TypeFor[time.Duration]() {
		d, err := time.ParseDuration(s)
		if err != nil {
			return v, err
		}
		v.SetInt(int64(d))
		return v, nil
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		x, err := strconv.ParseBool(s)
		if err != nil {
			return v, err
		}
		v.SetBool(x)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x, err := strconv.ParseInt(s, 0, t.Bits())
		if err != nil {
			return v, err
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x, err := strconv.ParseUint(s, 0, t.Bits())
		if err != nil {
			return v, err
		}
		v.SetUint(x)
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(s, t.Bits())
		if err != nil {
			return v, err
		}
		v.SetFloat(x)
	case reflect.Slice:
		var parts []string
		if strings.TrimSpace(s) != "" {
			parts = strings.Split(s, ",")
		}
		sl := reflect.MakeSlice(t, len(parts), len(parts))
		for i, p := range parts {
			e, err := parseValue(t.Elem(), strings.TrimSpace(p))
			if err != nil {
				return v, err
			}
			sl.Index(i).Set(e)
		}
		v.Set(sl)
	default:
		return v, fmt.Errorf("unsupported type %s", t)
	}
	return v, nil
}

func formatValue(v reflect.Value) string {
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return time.Duration(v.Int()).String()
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = formatValue(v.Index(i))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}
