package spec

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"dflash/data/chat"
	"dflash/data/jsonl"
	"dflash/internal/cputime"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// BenchmarkDemoDir decodes the held-out prompts of a kept demo directory
// (DFLASH_DEMO_DIR=D after `dflash demo --dir D`; skipped without it), as
// the demo's last stage and `dflash spec --prompts D/heldout.jsonl
// --max-new-tokens 96` do, with the drafter and with the target alone, and
// reports the process CPU time per generated token of each and their
// ratio: the speedup on an otherwise idle machine with the benchmark's
// GOMAXPROCS, which wall time on a shared machine does not give. Run:
//
//	DFLASH_DEMO_DIR=/tmp/demo go test -run '^$' -bench DemoDir -benchtime 3x -cpu 1 ./spec/
func BenchmarkDemoDir(b *testing.B) {
	dir := os.Getenv("DFLASH_DEMO_DIR")
	if dir == "" {
		b.Skip("DFLASH_DEMO_DIR is not set (a directory of dflash demo --dir)")
	}
	tdir := filepath.Join(dir, "target")
	target, err := model.Load(tdir)
	if err != nil {
		b.Fatal(err)
	}
	d, err := dflash.LoadDir[float32](filepath.Join(dir, "drafter"))
	if err != nil {
		b.Fatal(err)
	}
	tok, tmpl, err := chat.LoadModel(tdir)
	if err != nil {
		b.Fatal(err)
	}
	lines, err := jsonl.OpenLines([]string{filepath.Join(dir, "heldout.jsonl")}) // demo.HeldOutFile
	if err != nil {
		b.Fatal(err)
	}
	defer lines.Close()
	var prompts [][]int32
	for {
		ln, err := lines.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		msgs, err := jsonl.Parse(ln, jsonl.Auto)
		if err != nil {
			b.Fatal(err)
		}
		text, _, err := tmpl.Render(msgs, chat.Options{AddGenerationPrompt: true})
		if err != nil {
			b.Fatal(err)
		}
		prompts = append(prompts, tok.Encode(text))
	}
	cpu := tensor.NewCPU[float32](0)
	f, err := NewDFlash(target, d, cpu)
	if err != nil {
		b.Fatal(err)
	}
	stop := []int32{int32(target.Config.EOSTokenIDs[0])}
	var specSec, baseSec float64
	var specTok, baseTok int
	st := NewStats(f.BlockSize())
	for b.Loop() {
		for _, p := range prompts {
			c0 := cputime.Seconds()
			out, s, err := Generate(context.Background(), cpu, target, f, p, Options{MaxNewTokens: 96, Stop: stop})
			if err != nil {
				b.Fatal(err)
			}
			c1 := cputime.Seconds()
			ref, err := target.Generate(cpu, p, model.GenerateOptions{MaxNewTokens: 96, Stop: stop})
			if err != nil {
				b.Fatal(err)
			}
			specSec, baseSec = specSec+c1-c0, baseSec+cputime.Seconds()-c1
			specTok, baseTok = specTok+len(out), baseTok+len(ref)
			st.Add(s)
			if !slices.Equal(out, ref) {
				b.Fatalf("speculative output %v differs from the target's %v", out, ref)
			}
		}
	}
	b.ReportMetric(st.AcceptanceLength(), "tau")
	b.ReportMetric(specSec*1e6/float64(specTok), "spec-cpu-us/token")
	b.ReportMetric(baseSec*1e6/float64(baseTok), "target-cpu-us/token")
	b.ReportMetric(baseSec/float64(baseTok)/(specSec/float64(specTok)), "cpu-speedup")
}
