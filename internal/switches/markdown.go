package switches

import (
	"fmt"
	"io"
	"strings"
)

// Markdown writes the table of every switch (name, type, default, whether
// it changes numbers, what it does), docs/SWITCHES.md's generated part.
func Markdown(w io.Writer) {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	fmt.Fprintln(w, "| switch | type | default | changes numbers | what it does |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, s := range all {
		st, _ := setting(s)
		numeric := "no"
		if st.Numeric {
			numeric = "**yes**"
		}
		def := "`" + st.Default + "`"
		if s.info().DefaultDoc != "" {
			def = cell(st.Default)
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", st.Name, cell(st.Type), def, numeric, cell(st.Doc))
	}
}
