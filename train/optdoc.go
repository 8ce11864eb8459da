package train

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Markdown writes one table of every flag of the bound flag set: the options (each
// both a flag and a YAML key) in declaration order, then the flags that are not
// options (command line only). It is the documentation of a command's configuration.
func (o *Options) Markdown(w io.Writer) {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	fmt.Fprintln(w, "| flag / YAML key | type | default | allowed | meaning |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, op := range o.list {
		def := op.def
		if def != "" {
			def = "`" + def + "`"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", op.name, op.typeName(), cell(def), cell(op.allowed()), cell(op.help))
	}
	o.fs.VisitAll(func(f *flag.Flag) {
		if _, ok := o.byName[f.Name]; ok {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		def := f.DefValue
		if def != "" {
			def = "`" + def + "`"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | | %s (flag only) |\n", f.Name, name, cell(def), cell(usage))
	})
}
