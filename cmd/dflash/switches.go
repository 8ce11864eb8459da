package main

import (
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"dflash/internal/switches"
)

// logSwitches logs, in one line, the DFLASH_* switches that are not at
// their default (nothing when all are).
func logSwitches() {
	var attrs []any
	for _, s := range switches.Settings() {
		if !s.AtDefault {
			attrs = append(attrs, s.Name, s.Value)
		}
	}
	if len(attrs) > 0 {
		slog.Info("switches not at their default (dflash doctor lists every one)", attrs...)
	}
}

// printSwitches writes doctor's table of the switches: name, value ("-"
// when unset), default, whether it changes numerical results, and what it
// does.
func printSwitches(w io.Writer, ss []switches.Setting) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SWITCH\tVALUE\tDEFAULT\tNUMERIC\tWHAT IT DOES")
	for _, s := range ss {
		numeric := "no"
		if s.Numeric {
			numeric = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, dash(s.Value), s.Default, numeric, s.Doc)
	}
	tw.Flush()
}
