package train

import "testing"

func TestSpecEvalSchedule(t *testing.T) {
	s := SpecEval{SpecEvalEvery: 3}
	var due []int
	for step := 1; step <= 8; step++ {
		if s.due(step, 8) {
			due = append(due, step)
		}
	}
	if len(due) != 3 || due[0] != 3 || due[1] != 6 || due[2] != 8 {
		t.Fatalf("due at %v, want [3 6 8]", due)
	}
	if (SpecEval{}).due(8, 8) {
		t.Fatal("due with spec-eval-every 0")
	}
}
