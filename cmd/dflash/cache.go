package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"dflash/jit"
)

func init() {
	register(&command{name: "cache", summary: "kernel cache: ls, clear, stats", run: func(args []string) error {
		return subcommands("cache", map[string]*command{
			"ls":    {name: "ls", summary: "list the compiled kernels on disk", run: toStdout(cacheLs)},
			"clear": {name: "clear", summary: "delete the compiled kernels on disk", run: toStdout(cacheClear)},
			"stats": {name: "stats", summary: "summarise the kernel cache directory", run: toStdout(cacheStats)},
		}, args)
	}})
}

// toStdout makes a command that prints to w one that prints to stdout.
func toStdout(run func(w io.Writer, args []string) error) func(args []string) error {
	return func(args []string) error { return run(os.Stdout, args) }
}

const cacheDirUsage = "kernel cache directory (default: $DFLASH_KERNEL_CACHE, else $XDG_CACHE_HOME/dflash/kernels, else ~/.cache/dflash/kernels)"

// kernelCacheDir resolves the kernel cache directory from the --cache-dir
// flag or the environment, and says which rule chose it.
func kernelCacheDir(flagDir string) (dir, why string, err error) {
	if flagDir != "" {
		return flagDir, "--cache-dir", nil
	}
	return jit.DefaultDir()
}

// cacheFlags parses the flags shared by the cache subcommands.
func cacheFlags(name string, args []string) (dir string, asJSON bool, err error) {
	fs := newFlagSet("cache "+name, "cache "+name+" [--cache-dir DIR] [--json]")
	flagDir := fs.String("cache-dir", "", cacheDirUsage)
	j := fs.Bool("json", false, "print one JSON object instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return "", false, err
	}
	if fs.NArg() > 0 {
		return "", false, usageError(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	dir, _, err = kernelCacheDir(*flagDir)
	if err == nil && dir == "" {
		err = fmt.Errorf("the kernel cache is memory-only ($DFLASH_KERNEL_CACHE=off): no directory to %s", name)
	}
	return dir, *j, err
}

// cacheEntryJSON is one file of `dflash cache ls`: the entry's metadata
// fields appear only for a valid entry.
type cacheEntryJSON struct {
	Key       string `json:"key,omitempty"`
	Path      string `json:"path"`
	Bytes     int64  `json:"bytes"`
	*jit.Meta        // nil for an unfinished write or an invalid file
	Status    string `json:"status"`
}

func cacheLs(w io.Writer, args []string) error {
	dir, asJSON, err := cacheFlags("ls", args)
	if err != nil {
		return err
	}
	ents, err := jit.List(dir)
	if err != nil {
		return err
	}
	var rows []cacheEntryJSON
	for _, e := range ents {
		r := cacheEntryJSON{Path: e.Path, Bytes: e.Size, Status: "ok"}
		switch {
		case e.Temp:
			r.Status = "unfinished write"
		case e.Err != nil:
			r.Status = "invalid: " + e.Err.Error()
		default:
			r.Key, r.Meta = e.Key.String(), &e.Meta
		}
		rows = append(rows, r)
	}
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"dir": dir, "entries": rows})
	}
	fmt.Fprintf(w, "kernel cache %s: %d files\n", dir, len(rows))
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tFAMILY\tARCH\tBYTES\tCOMPILE\tCREATED\tCOMPILER\tPARAMS\tSTATUS")
	for _, r := range rows {
		key, created, m := "-", "-", jit.Meta{}
		if r.Meta != nil {
			m = *r.Meta
		}
		if len(r.Key) >= 12 {
			key = r.Key[:12]
		}
		if !m.Created.IsZero() {
			created = m.Created.Local().Format("2006-01-02 15:04")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f ms\t%s\t%s\t%s\t%s\n", key, dash(m.Family), dash(m.Arch), r.Bytes,
			m.CompileMS, created, dash(m.Compiler), paramsStr(m.Params), r.Status)
	}
	return tw.Flush()
}

// dash returns s, or "-" for an empty table cell.
func dash(s string) string { return cmp.Or(s, "-") }

// paramsStr returns a kernel's specialisation parameters as k=v pairs in key
// order, or "-" when it has none.
func paramsStr(p map[string]string) string {
	kv := make([]string, 0, len(p))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		kv = append(kv, k+"="+p[k])
	}
	return dash(strings.Join(kv, ","))
}

func cacheClear(w io.Writer, args []string) error {
	dir, asJSON, err := cacheFlags("clear", args)
	if err != nil {
		return err
	}
	files, bytes, err := jit.Clear(dir)
	if asJSON {
		if jerr := json.NewEncoder(w).Encode(map[string]any{"dir": dir, "files": files, "bytes": bytes}); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(w, "removed %d files (%d bytes) from %s\n", files, bytes, dir)
	}
	return err
}

func cacheStats(w io.Writer, args []string) error {
	dir, asJSON, err := cacheFlags("stats", args)
	if err != nil {
		return err
	}
	st, err := jit.StatDir(dir)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(w).Encode(st)
	}
	return writeDirStats(w, st)
}

// writeDirStats prints a cache directory summary as a table.
func writeDirStats(w io.Writer, st jit.DirStats) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "directory\t%s\n", st.Dir)
	fmt.Fprintf(tw, "kernels\t%d (%d bytes)\n", st.Entries, st.Bytes)
	fmt.Fprintf(tw, "invalid files\t%d (discarded and rebuilt on next use)\n", st.Invalid)
	fmt.Fprintf(tw, "unfinished writes\t%d\n", st.Temp)
	fmt.Fprintf(tw, "compile time recorded\t%.0f ms\n", st.CompileMS)
	for _, f := range slices.Sorted(maps.Keys(st.Families)) {
		fmt.Fprintf(tw, "family %s\t%d kernels\n", f, st.Families[f])
	}
	return tw.Flush()
}
