package dflash

// TinyTargetData is tinyTargetData, for the tests of package dflash_test
// (the data-parallel tests, which train through package recipe, itself an
// importer of dflash).
var TinyTargetData = tinyTargetData
