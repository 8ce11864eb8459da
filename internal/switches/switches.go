package switches

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Info is what every switch declares besides its type and default.
type Info struct {
	Name    string // the environment variable, DFLASH_...
	Doc     string // one line: what it does
	Numeric bool   // changes numerical results: recorded in a run's identity when not at its default
	Secret  bool   // its value is not shown (Settings gives "(set)")
	// DefaultDoc is the default in words where it is not one value of the
	// type ("the GPU's architecture decides"); such a switch is at its
	// default only when unset.
	DefaultDoc string
}

// Raw returns the variable's value without surrounding spaces ("" when
// unset): the one place that reads a DFLASH_* variable.
func (i *Info) Raw() string { return strings.TrimSpace(os.Getenv(i.Name)) }

func (i *Info) info() *Info { return i }

// unlessDoc returns v, a default in canonical form, or "" when DefaultDoc
// gives the default in words.
func (i *Info) unlessDoc(v string) string {
	if i.DefaultDoc != "" {
		return ""
	}
	return v
}

func (i *Info) refuse(raw, want string) error {
	return fmt.Errorf("%s=%q: want %s", i.Name, raw, want)
}

// declared is a switch of any type, as the registry's functions see it.
type declared interface {
	info() *Info
	kind() string                         // the type as the docs show it
	defaultValue() string                 // the default in canonical form; "" when DefaultDoc gives it
	canonical(raw string) (string, error) // raw (not empty) in canonical form, or why it does not parse
}

// all is every declared switch in table.go's order.
var all []declared

// declare adds s to the registry.
func declare[T declared](s T) T {
	all = append(all, s)
	return s
}

// Bool is a switch that is on or off.
type Bool struct {
	Info
	Default bool
}

const boolWords = "a boolean: 1, 0, true, false, yes, no, on or off (any case)"

func (b *Bool) parse(raw string) (bool, error) {
	switch strings.ToLower(raw) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, b.refuse(raw, boolWords)
}

// Lookup returns the switch's value and whether the variable is set (not
// empty); unset, Default and false.
func (b *Bool) Lookup() (v, set bool, err error) {
	raw := b.Raw()
	if raw == "" {
		return b.Default, false, nil
	}
	v, err = b.parse(raw)
	return v, true, err
}

// Value returns the switch's value, Default when unset.
func (b *Bool) Value() (bool, error) {
	v, _, err := b.Lookup()
	return v, err
}

// MustValue returns Value for a switch read at package initialisation, where
// no error can be returned: it panics with Value's error (the process cannot
// honour a value it does not understand).
func (b *Bool) MustValue() bool {
	v, err := b.Value()
	if err != nil {
		panic(err)
	}
	return v
}

func (b *Bool) kind() string { return "bool" }

func (b *Bool) defaultValue() string { return b.unlessDoc(strconv.FormatBool(b.Default)) }

func (b *Bool) canonical(raw string) (string, error) {
	v, err := b.parse(raw)
	return strconv.FormatBool(v), err
}

// Int is a whole number within [Min, Max].
type Int struct {
	Info
	Default, Min, Max int
}

func (n *Int) parse(raw string) (int, error) {
	v, err := strconv.Atoi(raw)
	if err != nil || v < n.Min || v > n.Max {
		return 0, n.refuse(raw, fmt.Sprintf("a whole number from %d to %d", n.Min, n.Max))
	}
	return v, nil
}

// Value returns the switch's value, Default when unset.
func (n *Int) Value() (int, error) {
	raw := n.Raw()
	if raw == "" {
		return n.Default, nil
	}
	return n.parse(raw)
}

func (n *Int) kind() string { return fmt.Sprintf("int %d..%d", n.Min, n.Max) }

func (n *Int) defaultValue() string { return n.unlessDoc(strconv.Itoa(n.Default)) }

func (n *Int) canonical(raw string) (string, error) {
	v, err := n.parse(raw)
	return strconv.Itoa(v), err
}

// Uint is an unsigned 64-bit whole number.
type Uint struct {
	Info
	Default uint64
}

func (u *Uint) parse(raw string) (uint64, error) {
	v, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, u.refuse(raw, "an unsigned 64-bit whole number")
	}
	return v, nil
}

// Lookup returns the switch's value and whether the variable is set (not
// empty); unset, Default and false.
func (u *Uint) Lookup() (v uint64, set bool, err error) {
	raw := u.Raw()
	if raw == "" {
		return u.Default, false, nil
	}
	v, err = u.parse(raw)
	return v, true, err
}

func (u *Uint) kind() string { return "uint" }

func (u *Uint) defaultValue() string { return u.unlessDoc(strconv.FormatUint(u.Default, 10)) }

func (u *Uint) canonical(raw string) (string, error) {
	v, err := u.parse(raw)
	return strconv.FormatUint(v, 10), err
}

// Enum is one of a few words.
type Enum struct {
	Info
	Values  []string // lower case
	Default string   // one of Values
}

func (e *Enum) parse(raw string) (string, error) {
	v := strings.ToLower(raw)
	if !slices.Contains(e.Values, v) {
		return "", e.refuse(raw, "one of "+strings.Join(e.Values, ", ")+" (any case)")
	}
	return v, nil
}

// Value returns the switch's value in lower case, Default when unset.
func (e *Enum) Value() (string, error) {
	raw := e.Raw()
	if raw == "" {
		return e.Default, nil
	}
	return e.parse(raw)
}

func (e *Enum) kind() string { return strings.Join(e.Values, "|") }

func (e *Enum) defaultValue() string { return e.unlessDoc(e.Default) }

func (e *Enum) canonical(raw string) (string, error) { return e.parse(raw) }

// String is any text: a path, a token.
type String struct {
	Info
	What string // what the text is, for the docs: "path", "text"
}

// Value returns the variable's value ("" when unset).
func (s *String) Value() string { return s.Raw() }

func (s *String) kind() string                         { return s.What }
func (s *String) defaultValue() string                 { return "" }
func (s *String) canonical(raw string) (string, error) { return raw, nil }

// Setting is one switch as the process sees it.
type Setting struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Value     string `json:"value"`   // canonical; "" when unset; as given when it does not parse; "(set)" for a secret
	Default   string `json:"default"` // the default, in canonical form or in words
	Set       bool   `json:"set"`     // the variable is set (not empty)
	AtDefault bool   `json:"at_default"`
	Numeric   bool   `json:"numeric"` // changes numerical results
	Doc       string `json:"doc"`
	Err       string `json:"error,omitempty"` // why Value does not parse
}

// setting returns s as the process sees it, and the error of its value.
func setting(s declared) (Setting, error) {
	i := s.info()
	st := Setting{Name: i.Name, Type: s.kind(), Default: s.defaultValue(), Numeric: i.Numeric, Doc: i.Doc, AtDefault: true}
	if i.DefaultDoc != "" {
		st.Default = i.DefaultDoc
	}
	raw := i.Raw()
	if raw == "" {
		return st, nil
	}
	v, err := s.canonical(raw)
	st.Set, st.Value = true, v
	st.AtDefault = i.DefaultDoc == "" && v == s.defaultValue()
	if err != nil {
		st.Value, st.AtDefault, st.Err = raw, false, err.Error()
	}
	if i.Secret {
		st.Value = "(set)"
	}
	return st, err
}

// Settings returns every declared switch as the process sees it, in the
// table's order.
func Settings() []Setting {
	out := make([]Setting, len(all))
	for i, s := range all {
		out[i], _ = setting(s)
	}
	return out
}

// Validate checks the value of every switch: nil when all parse, else an
// error of one line naming each bad variable, its value and what is
// accepted.
func Validate() error {
	var errs []error
	for _, s := range all {
		if _, err := setting(s); err != nil {
			errs = append(errs, err)
		}
	}
	return oneLine(errs)
}

// oneLine joins errs into one error of one line ("; " between them), nil
// for none.
func oneLine(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// IdentityPrefix starts the identity key of a switch: "switch.DFLASH_NOASM".
const IdentityPrefix = "switch."

// Identity returns the switches that change numerical results and are not at
// their default, as run identity entries (IdentityPrefix + name: canonical
// value), so that a run resumed under other numerics differs from its
// checkpoint. It is empty when every such switch is at its default.
func Identity() (map[string]string, error) {
	id := map[string]string{}
	var errs []error
	for _, s := range all {
		if !s.info().Numeric {
			continue
		}
		st, err := setting(s)
		if err != nil {
			errs = append(errs, err)
		} else if !st.AtDefault {
			id[IdentityPrefix+st.Name] = st.Value
		}
	}
	return id, oneLine(errs)
}
