package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/switches"
	"dflash/jit"
	"dflash/kernels"
)

func init() {
	register(&command{name: "doctor", summary: "report GPUs, CUDA libraries, the kernel cache and the DFLASH_* switches", run: runDoctor})
}

type doctorLib struct {
	Name    string `json:"name"`
	Env     string `json:"env"`
	Found   bool   `json:"found"`
	Path    string `json:"path,omitempty"`
	How     string `json:"how,omitempty"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

type doctorGPU struct {
	Ordinal      int     `json:"ordinal"`
	Name         string  `json:"name"`
	Arch         string  `json:"arch"`
	MemoryGiB    float64 `json:"memory_gib"`
	SMs          int     `json:"sms"`
	SharedOptinK int     `json:"shared_per_block_optin_kib"`
	L2MiB        float64 `json:"l2_mib"`
}

type doctorSmoke struct {
	Ran      bool      `json:"ran"`
	OK       bool      `json:"ok"`
	Detail   string    `json:"detail"`
	Stats    jit.Stats `json:"stats"`
	GetMS    float64   `json:"get_ms"`
	LaunchOK bool      `json:"launch_ok"`
}

type doctorReport struct {
	Go        string             `json:"go"`
	Platform  string             `json:"platform"`
	CPUs      int                `json:"cpus"`
	Libraries []doctorLib        `json:"libraries"`
	GPUCount  int                `json:"gpu_count"`
	GPUError  string             `json:"gpu_error,omitempty"`
	GPUs      []doctorGPU        `json:"gpus"`
	CacheDir  string             `json:"cache_dir"`
	CacheWhy  string             `json:"cache_dir_from"`
	Cache     jit.DirStats       `json:"cache"`
	CacheErr  string             `json:"cache_error,omitempty"`
	Smoke     doctorSmoke        `json:"smoke"`
	Switches  []switches.Setting `json:"switches"`
}

func runDoctor(args []string) error {
	fs := newFlagSet("doctor", "doctor [--json] [--cache-dir DIR] [--smoke=false]")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	flagDir := fs.String("cache-dir", "", cacheDirUsage)
	smoke := fs.Bool("smoke", true, "with a GPU and NVRTC present, compile (or load) and launch a test kernel through the kernel cache")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r := doctorReport{Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
		Switches: switches.Settings()}
	for _, l := range cuda.Libraries() {
		d := doctorLib{Name: l.Name, Env: l.Env, Found: l.Path != "", Path: l.Path, How: l.How, Version: l.Version}
		if l.Err != nil {
			d.Error = l.Err.Error()
		}
		r.Libraries = append(r.Libraries, d)
	}
	n, err := gpu.Count()
	r.GPUCount = n
	if err != nil {
		r.GPUError = err.Error()
	}
	for i := 0; i < n; i++ {
		info, err := gpu.QueryInfo(i)
		if err != nil {
			r.GPUError = err.Error()
			break
		}
		r.GPUs = append(r.GPUs, doctorGPU{Ordinal: i, Name: info.Name, Arch: info.Arch(),
			MemoryGiB: round1(float64(info.TotalMem) / (1 << 30)), SMs: info.SMs,
			SharedOptinK: info.SharedPerBlockOptin / 1024, L2MiB: round1(float64(info.L2Bytes) / (1 << 20))})
	}
	r.CacheDir, r.CacheWhy, err = kernelCacheDir(*flagDir)
	if err != nil {
		r.CacheErr = err.Error()
	} else if r.CacheDir != "" {
		if r.Cache, err = jit.StatDir(r.CacheDir); err != nil {
			r.CacheErr = err.Error()
		}
	}
	if *smoke && n > 0 && r.CacheErr == "" {
		r.Smoke = doctorSmokeTest(r.CacheDir)
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	printDoctor(r)
	return nil
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// doctorSmokeTest gets saxpy from a kernel cache on dir (compiling it the
// first time), launches it on GPU 0 and checks the result.
func doctorSmokeTest(dir string) doctorSmoke {
	s := doctorSmoke{Ran: true}
	c, err := jit.NewNVRTCCache(dir)
	if err != nil {
		s.Detail = err.Error()
		return s
	}
	w, err := gpu.Open(0)
	if err != nil {
		s.Detail = err.Error()
		return s
	}
	defer w.Close()
	t0 := time.Now()
	img, err := c.Get(context.Background(), jit.Source{Family: "doctor", Code: kernels.Source("saxpy.cu"), Arch: w.Info().Arch()})
	s.GetMS = float64(time.Since(t0).Microseconds()) / 1000
	if err != nil {
		s.Detail = err.Error()
		s.Stats = c.Stats()
		return s
	}
	const size = 4096
	x, y := make([]float32, size), make([]float32, size)
	for i := range x {
		x[i], y[i] = float32(i%97)-48, float32(i%13)
	}
	var got []float32
	err = w.Run(func(d *gpu.Device) error {
		fn, err := img.Function(d, "saxpy")
		if err == nil {
			got, err = gpu.Saxpy(d, fn, 2, x, y)
		}
		return err
	})
	s.Stats = c.Stats()
	if err != nil {
		s.Detail = err.Error()
		return s
	}
	s.LaunchOK = true
	for i := range got {
		if got[i] != 2*x[i]+y[i] {
			s.LaunchOK = false
			s.Detail = fmt.Sprintf("saxpy result %d = %v, want %v", i, got[i], 2*x[i]+y[i])
			return s
		}
	}
	s.OK = true
	how := "compiled with " + c.CompilerVersion()
	if img.FromDisk {
		how = "loaded from disk"
	}
	s.Detail = fmt.Sprintf("saxpy %s in %.1f ms, launched on GPU 0, result exact", how, s.GetMS)
	return s
}

func printDoctor(r doctorReport) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "dflash doctor\t%s %s, %d CPUs\n", r.Go, r.Platform, r.CPUs)
	fmt.Fprintln(tw, "\nLIBRARY\tVERSION\tFOUND\tOVERRIDE")
	for _, l := range r.Libraries {
		where := "not found"
		if l.Found {
			where = l.Path + " (" + l.How + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t$%s\n", l.Name, dash(l.Version), where, l.Env)
	}
	tw.Flush()
	for _, l := range r.Libraries {
		if l.Error != "" {
			fmt.Printf("\n%s: %s\n", l.Name, indent(l.Error))
		}
	}
	fmt.Println()
	if r.GPUCount == 0 {
		msg := "no CUDA GPU"
		if r.GPUError != "" {
			msg += ": " + r.GPUError
		}
		fmt.Println(msg + " (dflash runs on the CPU backend)")
	} else {
		fmt.Fprintln(tw, "GPU\tNAME\tARCH\tMEMORY\tSMS\tSHARED/BLOCK\tL2")
		for _, g := range r.GPUs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f GiB\t%d\t%d KiB\t%.0f MiB\n", g.Ordinal, g.Name, g.Arch, g.MemoryGiB, g.SMs, g.SharedOptinK, g.L2MiB)
		}
		tw.Flush()
		if r.GPUError != "" {
			fmt.Println("GPU query error:", r.GPUError)
		}
	}
	fmt.Println()
	switch {
	case r.CacheErr != "":
		fmt.Println("kernel cache:", r.CacheErr)
	case r.CacheDir == "":
		fmt.Printf("kernel cache: memory only (%s)\n", r.CacheWhy)
	default:
		fmt.Printf("kernel cache: %s (from %s)\n", r.CacheDir, r.CacheWhy)
		writeDirStats(os.Stdout, r.Cache)
	}
	if r.Smoke.Ran {
		status := "FAILED"
		if r.Smoke.OK {
			status = "ok"
		}
		fmt.Printf("\nsmoke test: %s: %s\n", status, r.Smoke.Detail)
		fmt.Println("kernel cache counters of this run:")
		r.Smoke.Stats.WriteTable(os.Stdout)
	}
	fmt.Println("\nswitches (docs/SWITCHES.md):")
	printSwitches(os.Stdout, r.Switches)
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
