package tensorcuda

import (
	"fmt"
	"os"
	"strconv"

	"dflash/gpu"
)

// gemmTuneEnv, unset or 1, makes the device time each GEMM plan's cuBLASLt
// candidates at its first use and keep the fastest (gpu.Device.SetGemmTuning),
// the choices saved in the kernel cache's directory; 0 keeps the heuristic's
// first candidate. Deterministic GEMMs are never tuned (gpu.Device.Gemm).
const gemmTuneEnv = "DFLASH_GEMM_TUNE"

// gemmWorkspaceEnv sets the cuBLASLt workspace in MiB
// (gpu.Device.SetGemmWorkspace); unset, gpu.GemmWorkspace.
const gemmWorkspaceEnv = "DFLASH_GEMM_WORKSPACE_MIB"

// gemmSettings parses $DFLASH_GEMM_TUNE and $DFLASH_GEMM_WORKSPACE_MIB:
// whether to tune, and the workspace bytes (0: the device's default).
func gemmSettings(tune, workspaceMiB string) (on bool, workspace int64, err error) {
	switch tune {
	case "0":
	case "", "1":
		on = true
	default:
		return false, 0, fmt.Errorf("tensorcuda: $%s=%q: want 1 (time each GEMM's algorithms) or 0", gemmTuneEnv, tune)
	}
	if workspaceMiB != "" {
		mib, err := strconv.Atoi(workspaceMiB)
		if err != nil || mib < 1 || mib > 4096 {
			return false, 0, fmt.Errorf("tensorcuda: $%s=%q: want a whole number of MiB from 1 to 4096", gemmWorkspaceEnv, workspaceMiB)
		}
		workspace = int64(mib) << 20
	}
	return on, workspace, nil
}

// applyGemmSettings sets d's GEMM workspace and tuning as the environment
// says, with the tuning file in dir ("": memory only).
func applyGemmSettings(d *gpu.Device, dir string) error {
	on, ws, err := gemmSettings(os.Getenv(gemmTuneEnv), os.Getenv(gemmWorkspaceEnv))
	if err != nil {
		return err
	}
	if ws != 0 {
		if err := d.SetGemmWorkspace(ws); err != nil {
			return err
		}
	}
	if on {
		return d.SetGemmTuning(dir)
	}
	return nil
}
