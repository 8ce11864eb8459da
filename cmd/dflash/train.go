package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"

	"dflash/internal/dirlock"
	"dflash/recipe"
	"dflash/rendezvous"
	"dflash/train"
)

func init() {
	register(&command{
		name:    "train",
		summary: "train a DFlash drafter for a target model on conversations",
		run:     runTrain,
	})
}

// trainArgs is a parsed `dflash train` command line: the job (its options
// are the flags and the config file's keys, recipe.Options; docs/CONFIG.md
// is their table) and the binding that names each option as it was given.
type trainArgs struct {
	spec recipe.Spec
	opts *train.Options
}

// trainFlags returns the flag set of `dflash train`, bound to a.
func trainFlags(a *trainArgs) (*flag.FlagSet, *string) {
	fs := newFlagSet("train", "train --target DIR --data DIR|FILE --out DIR [--config FILE.yaml] [flags]")
	fs.StringVar(&a.spec.TargetDir, "target", "", "target model `DIR` (HF: config.json, safetensors, tokenizer.json, tokenizer_config.json)")
	fs.Var((*pathList)(&a.spec.DataPaths), "data", "conversations: JSONL `FILE`s (.jsonl, .gz, .zst), DIRs of them, or data prep DIRs: several after one --data, or --data repeated")
	configPath := fs.String("config", "", "YAML `FILE` of options, keyed by the flag names (docs/CONFIG.md); flags override it")
	a.spec.Options = recipe.DefaultOptions()
	a.opts = train.BindOptions(fs, &a.spec.Options)
	a.spec.Source = a.opts.Source
	return fs, configPath
}

// parseTrain reads the flags and the config file and checks every option; nothing
// is written.
func parseTrain(args []string) (*trainArgs, error) {
	a := &trainArgs{}
	fs, configPath := trainFlags(a)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (every option is a --flag)", fs.Arg(0))
	}
	if *configPath != "" {
		if err := a.opts.LoadYAML(*configPath); err != nil {
			return nil, err
		}
	}
	a.opts.Apply()
	s := &a.spec
	if s.TargetDir == "" || len(s.DataPaths) == 0 {
		return nil, fmt.Errorf("--target and --data are required (see dflash train --help)")
	}
	if err := a.opts.Validate(); err != nil {
		return nil, usageError(err)
	}
	if s.Out == "" {
		return nil, fmt.Errorf("--out is empty: an output directory is required")
	}
	var err error
	s.Launch, err = rendezvous.ParseLaunch(rendezvous.LaunchFlags{Rank: s.Rank, WorldSize: s.WorldSize, Addr: s.Rendezvous,
		RankName: a.opts.Source("rank"), WorldSizeName: a.opts.Source("world-size"), AddrName: a.opts.Source("rendezvous")}, os.Getenv)
	if err != nil {
		return nil, err
	}
	return a, nil
}

func runTrain(args []string) error {
	a, err := parseTrain(args)
	if err != nil {
		return err
	}
	// Rank 0 alone writes the output directory; the other processes of a
	// job (which may share it) read the checkpoint they resume from.
	if a.spec.Launch.Rank == 0 {
		lock, err := dirlock.Acquire(a.spec.Out, "dflash train")
		if err != nil {
			return err
		}
		defer lock.Release()
	}
	ctx, caught, stop := signalContext()
	defer stop()
	logSwitches()
	res, err := recipe.Run(ctx, a.spec)
	if err == nil && res.Drafter != "" {
		t := res.Train
		fmt.Printf("trained %d steps (%d tokens) in %s; drafter written to %s\n", t.Steps, t.Tokens, t.Elapsed.Round(1e9), res.Drafter)
		for _, k := range slices.Sorted(maps.Keys(t.LastEval)) {
			fmt.Printf("  eval %-8s %.4f\n", k, t.LastEval[k])
		}
	}
	if sig := caught(); sig != nil {
		return interrupted(sig, res, args)
	}
	return err
}

// interrupted is the error of a run stopped by signal sig: it names the checkpoint
// and the command that resumes, and carries the exit status 128+sig.
func interrupted(sig os.Signal, res *recipe.Result, args []string) error {
	name := signalName(sig)
	if res == nil || res.Train == nil || res.Train.Checkpoint == "" {
		return &exitError{code: signalStatus(sig), err: fmt.Errorf("interrupted by %s before a step was done; nothing to resume", name)}
	}
	if !slices.Contains(args, "--resume") && !slices.Contains(args, "-resume") {
		args = append(slices.Clone(args), "--resume")
	}
	return &exitError{code: signalStatus(sig), err: fmt.Errorf("interrupted by %s after step %d: checkpoint %s\nresume with: dflash train %s",
		name, res.Train.Steps, res.Train.Checkpoint, shellQuote(args))}
}
