package switches

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

// Test switches of every type, outside the table (Validate and Identity
// see only the table's).
var (
	tBool = &Bool{Info: Info{Name: "DFLASH_T_BOOL"}, Default: true}
	tInt  = &Int{Info: Info{Name: "DFLASH_T_INT"}, Default: 32, Min: 1, Max: 4096}
	tUint = &Uint{Info: Info{Name: "DFLASH_T_UINT"}, Default: 7}
	tEnum = &Enum{Info: Info{Name: "DFLASH_T_ENUM"}, Values: []string{"auto", "hopper", "portable"}, Default: "auto"}
	tStr  = &String{Info: Info{Name: "DFLASH_T_STR"}, What: "path"}
)

// TestParse: each type's parse rule on good and bad values; a bad value's
// error names the variable, the value and what is accepted.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		s    declared
		raw  string
		want string // canonical value; "" with err
		err  string // part of the error after "NAME=raw: want "
	}{
		{tBool, "", "true", ""}, {tBool, "1", "true", ""}, {tBool, "0", "false", ""}, {tBool, "TRUE", "true", ""},
		{tBool, "False", "false", ""}, {tBool, "yes", "true", ""}, {tBool, "NO", "false", ""}, {tBool, "on", "true", ""},
		{tBool, " Off ", "false", ""}, {tBool, "2", "", "a boolean: 1, 0, true"}, {tBool, "enabled", "", "yes, no, on or off"},
		{tInt, "", "32", ""}, {tInt, "1", "1", ""}, {tInt, "4096", "4096", ""}, {tInt, " 128 ", "128", ""},
		{tInt, "0", "", "from 1 to 4096"}, {tInt, "4097", "", "from 1 to 4096"}, {tInt, "32MiB", "", "whole number"}, {tInt, "1.5", "", "whole number"},
		{tUint, "", "7", ""}, {tUint, "18446744073709551615", "18446744073709551615", ""}, {tUint, "-1", "", "unsigned"}, {tUint, "x", "", "unsigned"},
		{tEnum, "", "auto", ""}, {tEnum, "portable", "portable", ""}, {tEnum, "Hopper", "hopper", ""}, {tEnum, "v7", "", "one of auto, hopper, portable"},
		{tStr, "", "", ""}, {tStr, "/x/lib.so", "/x/lib.so", ""},
	} {
		name := c.s.info().Name
		t.Setenv(name, c.raw)
		st, err := setting(c.s)
		if c.err != "" {
			prefix := fmt.Sprintf("%s=%q: ", name, c.raw)
			if err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s=%q: error %v, want one starting %q and containing %q", name, c.raw, err, prefix, c.err)
			}
			if st.Err == "" || st.AtDefault || !st.Set {
				t.Errorf("%s=%q: setting %+v, want the error, set, not at default", name, c.raw, st)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s=%q: %v", name, c.raw, err)
			continue
		}
		got := st.Value
		if !st.Set {
			got = c.s.defaultValue()
		}
		if got != c.want {
			t.Errorf("%s=%q: value %q, want %q", name, c.raw, got, c.want)
		}
	}
}

// TestTypedValues: the typed accessors give the parsed value, the default
// when unset, and the parse error otherwise.
func TestTypedValues(t *testing.T) {
	t.Setenv(tBool.Name, "")
	if v, set, err := tBool.Lookup(); !v || set || err != nil {
		t.Errorf("unset bool: %v %v %v, want the default true, unset", v, set, err)
	}
	t.Setenv(tBool.Name, "off")
	if v, set, err := tBool.Lookup(); v || !set || err != nil {
		t.Errorf("bool off: %v %v %v", v, set, err)
	}
	t.Setenv(tBool.Name, "maybe")
	if _, err := tBool.Value(); err == nil || !strings.Contains(err.Error(), `DFLASH_T_BOOL="maybe"`) {
		t.Errorf("bool maybe: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "DFLASH_T_BOOL") {
				t.Errorf("MustValue of a bad value: recovered %v, want a panic naming the variable", r)
			}
		}()
		tBool.MustValue()
	}()
	t.Setenv(tInt.Name, "")
	if v, err := tInt.Value(); v != 32 || err != nil {
		t.Errorf("unset int: %v %v", v, err)
	}
	t.Setenv(tInt.Name, "64")
	if v, err := tInt.Value(); v != 64 || err != nil {
		t.Errorf("int 64: %v %v", v, err)
	}
	t.Setenv(tUint.Name, "")
	if v, set, err := tUint.Lookup(); v != 7 || set || err != nil {
		t.Errorf("unset uint: %v %v %v", v, set, err)
	}
	t.Setenv(tEnum.Name, "PORTABLE")
	if v, err := tEnum.Value(); v != "portable" || err != nil {
		t.Errorf("enum PORTABLE: %q %v", v, err)
	}
	t.Setenv(tStr.Name, " /x ")
	if v := tStr.Value(); v != "/x" {
		t.Errorf("string: %q", v)
	}
}

// TestNoASMZeroIsOn: DFLASH_NOASM=0 keeps the assembly on, as every false
// word does; only true words turn it off.
func TestNoASMZeroIsOn(t *testing.T) {
	for raw, off := range map[string]bool{"": false, "0": false, "false": false, "no": false, "off": false, "1": true, "true": true, "YES": true, "on": true} {
		t.Setenv(NoASM.Name, raw)
		if v, err := NoASM.Value(); err != nil || v != off {
			t.Errorf("DFLASH_NOASM=%q: %v, %v; want %v", raw, v, err, off)
		}
	}
}

// clearTable unsets every declared switch for the test.
func clearTable(t *testing.T) {
	for _, s := range all {
		t.Setenv(s.info().Name, "")
	}
}

// TestValidateAndIdentity: Validate names every bad switch; Identity holds
// exactly the numeric switches not at their default, in canonical form.
func TestValidateAndIdentity(t *testing.T) {
	clearTable(t)
	if err := Validate(); err != nil {
		t.Fatalf("nothing set: %v", err)
	}
	if id, err := Identity(); err != nil || len(id) != 0 {
		t.Fatalf("nothing set: identity %v, %v; want none", id, err)
	}
	t.Setenv(NoASM.Name, "0")             // numeric, at its default
	t.Setenv(FlexFwd.Name, "Portable")    // numeric, not at its default
	t.Setenv(GemmWorkspaceMiB.Name, "64") // numeric, not at its default
	t.Setenv(CUDAGraphs.Name, "off")      // not numeric
	id, err := Identity()
	want := map[string]string{"switch.DFLASH_FLEX_FWD": "portable", "switch.DFLASH_GEMM_WORKSPACE_MIB": "64"}
	if err != nil || !maps.Equal(id, want) {
		t.Errorf("identity %v, %v; want %v", id, err, want)
	}
	t.Setenv(CUDAGraphs.Name, "sometimes")
	t.Setenv(FlexBwd.Name, "v2")
	err = Validate()
	for _, part := range []string{`DFLASH_CUDA_GRAPHS="sometimes": want a boolean`, `DFLASH_FLEX_BWD="v2": want one of auto, hopper, portable`} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("Validate: %v, want it to contain %q", err, part)
		}
	}
	if _, err := Identity(); err == nil || !strings.Contains(err.Error(), "DFLASH_FLEX_BWD") {
		t.Errorf("Identity with a bad numeric switch: %v", err)
	}
}

// TestTable: every switch is named DFLASH_*, once, with a doc line, and a
// default that is a value of its type (or is given in words).
func TestTable(t *testing.T) {
	clearTable(t)
	seen := map[string]bool{}
	for _, st := range Settings() {
		if !strings.HasPrefix(st.Name, "DFLASH_") || seen[st.Name] || st.Doc == "" || st.Default == "" && st.Type != "path" && st.Type != "NAME=int,..." {
			t.Errorf("bad declaration %+v", st)
		}
		seen[st.Name] = true
	}
	for _, s := range all {
		if d := s.defaultValue(); d != "" {
			if v, err := s.canonical(d); err != nil || v != d {
				t.Errorf("%s: default %q is not a canonical value (%q, %v)", s.info().Name, d, v, err)
			}
		}
	}
	t.Setenv(JobToken.Name, "s3cret")
	for _, st := range Settings() {
		if st.Name == JobToken.Name && st.Value != "(set)" {
			t.Errorf("the job token is shown: %+v", st)
		}
	}
}
