package main

import (
	"strings"
	"testing"

	"dflash/jit"
)

func TestParamsStr(t *testing.T) {
	for _, c := range []struct {
		p    map[string]string
		want string
	}{
		{nil, "-"},
		{map[string]string{}, "-"},
		{map[string]string{"D": "128"}, "D=128"},
		{map[string]string{"group": "4", "D": "64", "block_q": "128"}, "D=64,block_q=128,group=4"},
	} {
		if got := paramsStr(c.p); got != c.want {
			t.Errorf("paramsStr(%v) = %q, want %q", c.p, got, c.want)
		}
	}
}

func TestWriteDirStats(t *testing.T) {
	var b strings.Builder
	st := jit.DirStats{Dir: "/tmp/k", Entries: 3, Bytes: 4096, Invalid: 1, Temp: 2, CompileMS: 1234.4,
		Families: map[string]int{"flex": 2, "doctor": 1}}
	if err := writeDirStats(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"directory              /tmp/k\n", "kernels                3 (4096 bytes)\n",
		"invalid files          1 (discarded", "unfinished writes      2\n", "compile time recorded  1234 ms\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Families in name order.
	if i, j := strings.Index(out, "family doctor"), strings.Index(out, "family flex"); i < 0 || j < i {
		t.Errorf("families missing or out of order:\n%s", out)
	}
}
