package recipe

import (
	"context"

	"dflash/tensor"
)

// TrainRankOn makes the job of s and trains its first rank on b, for the
// tests of package recipe_test.
func TrainRankOn(ctx context.Context, s Spec, b tensor.Backend[float32]) error {
	j, err := prepare(ctx, s)
	if err != nil {
		return err
	}
	_, err = j.trainRank(ctx, rankEnv{backend: b, first: true})
	return err
}
