package tensorcuda

import (
	"fmt"

	"dflash/gpu"
	"dflash/internal/switches"
)

// gemmSettings reads DFLASH_GEMM_TUNE and DFLASH_GEMM_WORKSPACE_MIB: whether
// to time each GEMM plan's cuBLASLt candidates at its first use and keep the
// fastest (gpu.Device.SetGemmTuning; deterministic GEMMs are never tuned),
// and the workspace bytes (0: the device's default, gpu.GemmWorkspace).
func gemmSettings() (on bool, workspace int64, err error) {
	if on, err = switches.GemmTune.Value(); err != nil {
		return false, 0, fmt.Errorf("tensorcuda: %w", err)
	}
	mib, err := switches.GemmWorkspaceMiB.Value()
	if err != nil {
		return false, 0, fmt.Errorf("tensorcuda: %w", err)
	}
	if int64(mib)<<20 != gpu.GemmWorkspace {
		workspace = int64(mib) << 20
	}
	return on, workspace, nil
}

// applyGemmSettings sets d's GEMM workspace and tuning as the environment
// says, with the tuning file in dir ("": memory only).
func applyGemmSettings(d *gpu.Device, dir string) error {
	on, ws, err := gemmSettings()
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
