// Package kernels holds dflash's CUDA C sources, embedded so the binary
// carries them; each .cu file also builds alone with nvcc -arch=sm_90.
package kernels

import "embed"

// Flex holds the flex attention templates: flex_common.cuh, flex_fwd.cu,
// flex_fwd_wg.cu (with flex_wgmma.cuh, Hopper), flex_bwd.cu (with flex_bwd_dq.cuh) and flex_blockmask.cu.
//
//go:embed flex_common.cuh flex_fwd.cu flex_fwd_wg.cu flex_wgmma.cuh flex_fwd_wg.cuh flex_fwd_ws.cu flex_bwd.cu flex_bwd_dq.cuh flex_bwd_wg.cuh flex_blockmask.cu
var Flex embed.FS
