package recipe

// RunIdentity is runIdentity, for the tests of package recipe_test (which
// write their fixtures with recipetest, itself an importer of recipe).
var RunIdentity = runIdentity

// NotWritten is notWritten, for the tests of package recipe_test.
var NotWritten = notWritten
