package recipe

// RunIdentity is runIdentity, for the tests of package recipe_test (which
// write their fixtures with recipetest, itself an importer of recipe).
var RunIdentity = runIdentity

// NotWritten is notWritten, for the tests of package recipe_test.
var NotWritten = notWritten

// SetAvailableMemory replaces the host's available memory for the tests of
// package recipe_test and returns the function that restores it.
func SetAvailableMemory(f func() (uint64, bool)) (restore func()) {
	saved := availableMemory
	availableMemory = f
	return func() { availableMemory = saved }
}

// SpecEvalEvery is specEvalEvery, for the tests of package recipe_test.
var SpecEvalEvery = specEvalEvery
