package train

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// This file parses and formats option values (one parser for flags and YAML) and
// their ranges.

func supported(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool:
		return true
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String, reflect.Int, reflect.Float64:
			return true
		}
		return false
	}
	return numeric(t)
}

// numeric reports whether t (or a slice's element) is a number.
func numeric(t reflect.Type) bool {
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// parseValue parses s as a value of type t. A slice is comma separated.
func parseValue(t reflect.Type, s string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	if t == reflect.TypeFor[time.Duration]() {
		d, err := time.ParseDuration(s)
		if err != nil {
			return v, fmt.Errorf("%q is not a duration (like 90s or 2h)", s)
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
			return v, fmt.Errorf("%q is not true or false", s)
		}
		v.SetBool(x)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x, err := strconv.ParseInt(s, 10, t.Bits())
		if err != nil {
			return v, numberError(s, "an integer", err)
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		x, err := strconv.ParseUint(s, 10, t.Bits())
		if err != nil {
			return v, numberError(s, "a non-negative integer", err)
		}
		v.SetUint(x)
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(s, t.Bits())
		if err != nil {
			return v, numberError(s, "a number", err)
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return v, fmt.Errorf("%q is not a finite number", s)
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

func numberError(s, want string, err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("%s is out of range", s)
	}
	return fmt.Errorf("%q is not %s", s, want)
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

func asFloat(v reflect.Value) float64 {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint())
	}
	return v.Float()
}

// valueRange is an interval of allowed numbers; an absent bound is infinite.
type valueRange struct {
	lo, hi         float64
	loOpen, hiOpen bool
}

// parseRange reads ">=a", ">a", "<=b", "<b", or an interval "[a,b)" with [ or ( and ] or ).
func parseRange(s string) (*valueRange, error) {
	r := &valueRange{lo: math.Inf(-1), hi: math.Inf(1)}
	num := func(x string) (float64, error) { return strconv.ParseFloat(strings.TrimSpace(x), 64) }
	var err error
	switch {
	case strings.HasPrefix(s, ">="):
		r.lo, err = num(s[2:])
	case strings.HasPrefix(s, ">"):
		r.lo, err = num(s[1:])
		r.loOpen = true
	case strings.HasPrefix(s, "<="):
		r.hi, err = num(s[2:])
	case strings.HasPrefix(s, "<"):
		r.hi, err = num(s[1:])
		r.hiOpen = true
	case len(s) > 2 && strings.ContainsRune("[(", rune(s[0])) && strings.ContainsRune("])", rune(s[len(s)-1])):
		a, b, ok := strings.Cut(s[1:len(s)-1], ",")
		if !ok {
			return nil, fmt.Errorf("%q: no comma", s)
		}
		r.loOpen, r.hiOpen = s[0] == '(', s[len(s)-1] == ')'
		if r.lo, err = num(a); err == nil {
			r.hi, err = num(b)
		}
	default:
		return nil, fmt.Errorf("%q: want >=a, >a, <=b, <b or an interval like [a,b)", s)
	}
	if err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	return r, nil
}

func (r *valueRange) contains(x float64) bool {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return false
	}
	if x < r.lo || r.loOpen && x == r.lo || x > r.hi || r.hiOpen && x == r.hi {
		return false
	}
	return true
}

// String writes the range as ">= 1", "> 0" or "in [0, 1)".
func (r *valueRange) String() string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch {
	case math.IsInf(r.hi, 1) && r.loOpen:
		return "> " + f(r.lo)
	case math.IsInf(r.hi, 1):
		return ">= " + f(r.lo)
	case math.IsInf(r.lo, -1) && r.hiOpen:
		return "< " + f(r.hi)
	case math.IsInf(r.lo, -1):
		return "<= " + f(r.hi)
	}
	open, end := "[", "]"
	if r.loOpen {
		open = "("
	}
	if r.hiOpen {
		end = ")"
	}
	return "in " + open + f(r.lo) + ", " + f(r.hi) + end
}
